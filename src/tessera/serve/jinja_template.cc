#include "tessera/serve/jinja_template.h"

#include "tessera/core/error.h"
#include "tessera/serve/jinja_ast.h"
#include "tessera/serve/jinja_lexer.h"
#include "tessera/serve/jinja_parser.h"
#include "tessera/serve/jinja_renderer.h"
#include "tessera/serve/jinja_value.h"

namespace tessera::serve {

JinjaTemplate::JinjaTemplate(std::string_view source)
    : program_(std::make_unique<jinja::Body>(jinja::parse(jinja::tokenize(source)))) {}

JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;
JinjaTemplate& JinjaTemplate::operator=(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  check(context.is_object(), "a template's context must be a JSON object, not {}",
        context.type_name());
  return jinja::render(*program_, jinja::value_from_json(context));
}

}  // namespace tessera::serve
