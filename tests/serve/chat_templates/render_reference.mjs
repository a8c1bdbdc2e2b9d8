// Renders a chat template with @huggingface/jinja, the Jinja engine of Transformers.js, for the
// reference-equality test of tests/serve/chat_template_test.cc.
//
//   node render_reference.mjs TEMPLATE_FILE CONTEXT_JSON_FILE
//
// A context that is a JSON object is rendered to stdout (an error goes to stderr, exit status 1).
// A JSON array of contexts is rendered one by one, and stdout gets a JSON array with
// {"text": rendering} or {"error": message} for each, so that one node process serves a test.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [templatePath, contextPath] = process.argv.slice(2);
if (!templatePath || !contextPath) {
  console.error("usage: node render_reference.mjs TEMPLATE_FILE CONTEXT_JSON_FILE");
  process.exit(2);
}
const source = readFileSync(templatePath, "utf8");
const contexts = JSON.parse(readFileSync(contextPath, "utf8"));

function render(context) {
  return new Template(source).render(context);
}

if (Array.isArray(contexts)) {
  const results = contexts.map((context) => {
    try {
      return { text: render(context) };
    } catch (error) {
      return { error: error.message };
    }
  });
  process.stdout.write(JSON.stringify(results));
} else {
  try {
    process.stdout.write(render(contexts));
  } catch (error) {
    console.error(error.message);
    process.exit(1);
  }
}
