#include "finetune/template/template.h"

#include "ast.h"
#include "parser.h"
#include "renderer.h"

namespace finetune::jinja {

TemplateError::TemplateError(const std::string& template_name, size_t line, const std::string& message)
    : Error(template_name + (line > 0 ? " line " + std::to_string(line) : std::string()) + ": " + message),
      line_(line),
      message_(message) {}

Template::Template(std::string source, std::string name, TemplateOptions options)
    : program_(parse_template(source, name, options.max_nesting_depth)), options_(std::move(options)) {}

Template::Output Template::render(const nlohmann::ordered_json& context) const {
  Renderer renderer(*program_, options_);
  return renderer.render(context);
}

bool Template::has_generation_markers() const { return program_->has_generation; }

const std::string& Template::name() const { return program_->name; }

}  // namespace finetune::jinja
