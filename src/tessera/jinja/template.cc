#include "tessera/jinja/template.h"

#include "tessera/core/error.h"
#include "tessera/jinja/ast.h"
#include "tessera/jinja/lexer.h"
#include "tessera/jinja/parser.h"
#include "tessera/jinja/renderer.h"
#include "tessera/jinja/value.h"

namespace tessera::jinja {

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

}  // namespace tessera::jinja
