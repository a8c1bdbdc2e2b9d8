// A Jinja template engine for the subset of Jinja that Hugging Face chat templates use, rendering
// as transformers' apply_chat_template configures Python's jinja2: trim_blocks, lstrip_blocks,
// loop controls, {% generation %}, Python's semantics for values, and the globals
// raise_exception, strftime_now, range, namespace and dict. A template comes from a model folder
// and its context from the network: parsing and rendering are bounded (limits.h) and
// report every problem as a tessera::Error, never a crash or a hang.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tessera::jinja {

struct Stmt;

class JinjaTemplate {
 public:
  // Parses the template; an Error names the line and column of what is wrong.
  explicit JinjaTemplate(std::string_view source);
  ~JinjaTemplate();
  JinjaTemplate(JinjaTemplate&&) noexcept;
  JinjaTemplate& operator=(JinjaTemplate&&) noexcept;

  // `context` is an object of the variables the template sees. Its objects keep their key order
  // (an nlohmann::json converts, in its sorted order), which `tojson` and `items()` show. An
  // Error names the line and column where rendering failed, and carries the message of a
  // raise_exception().
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::unique_ptr<std::vector<Stmt>> program_;
};

}  // namespace tessera::jinja
