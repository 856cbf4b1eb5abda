#include "scope_analysis.h"

#include <map>
#include <set>

namespace finetune::jinja {
namespace {

// How a frame's variable starts (jinja2's VAR_LOAD_*): a parameter, looked up outside ("resolve"),
// copied from an enclosing frame ("alias"), or unbound.
enum class Load { Parameter, Resolve, Alias, Unbound };

// jinja2's Symbols: the frame's names (ordered, so the result is deterministic) and which it
// assigns. Where jinja2 copies a frame's table for each {% if %} branch, a branch here is an
// overlay on `base` holding only what the branch adds, so long chains of ifs cost no copies.
struct Symbols {
  const Symbols* parent = nullptr;  // the enclosing frame
  const Symbols* base = nullptr;    // the same frame, for a branch overlay
  std::map<std::string, Load> refs;
  std::set<std::string> stores;

  const Load* own_ref(const std::string& name) const {
    for (const Symbols* s = this; s != nullptr; s = s->base) {
      const auto it = s->refs.find(name);
      if (it != s->refs.end()) return &it->second;
    }
    return nullptr;
  }

  bool stored(const std::string& name) const {
    for (const Symbols* s = this; s != nullptr; s = s->base) {
      if (s->stores.count(name) != 0) return true;
    }
    return false;
  }

  bool has_ref(const std::string& name) const {
    return own_ref(name) != nullptr || (parent != nullptr && parent->has_ref(name));
  }

  Symbols branch() const {
    Symbols overlay;
    overlay.parent = parent;
    overlay.base = this;
    return overlay;
  }

  void load(const std::string& name) {
    if (!has_ref(name)) refs[name] = Load::Resolve;
  }

  void store(const std::string& name) {
    stores.insert(name);
    if (own_ref(name) != nullptr) return;
    refs[name] = parent != nullptr && parent->has_ref(name) ? Load::Alias : Load::Unbound;
  }

  void parameter(const std::string& name) {
    stores.insert(name);
    refs[name] = Load::Parameter;
  }

  // After an {% if %} (branches are overlays on this): a name first assigned in a branch counts
  // as read from outside.
  void branch_update(const std::vector<const Symbols*>& branches) {
    std::set<std::string> branch_stores;
    for (const Symbols* branch : branches) {
      for (const std::string& name : branch->stores) {
        if (!stored(name)) branch_stores.insert(name);
      }
    }
    for (const Symbols* branch : branches) {
      for (const auto& [name, load] : branch->refs) refs[name] = load;
      stores.insert(branch->stores.begin(), branch->stores.end());
    }
    for (const std::string& name : branch_stores) {
      refs[name] = parent != nullptr && parent->has_ref(name) ? Load::Alias : Load::Resolve;
    }
  }

  UnboundNames unbound() const {
    UnboundNames names;
    for (const auto& [name, load] : refs) {
      if (load == Load::Unbound) names.push_back(name);
    }
    return names;
  }
};

void visit_frame(const Body& body, Symbols& symbols);

void visit_expr(const Expr& expr, Symbols& symbols) {
  if (expr.kind == Expr::Kind::Name) symbols.load(static_cast<const NameExpr&>(expr).name);
  for_each_child(expr, [&](const Expr& child) { visit_expr(child, symbols); });
}

void visit_target(const Target& target, Symbols& symbols, bool as_parameter) {
  switch (target.kind) {
    case Target::Kind::Name:
      if (as_parameter) {
        symbols.parameter(target.name);
      } else {
        symbols.store(target.name);
      }
      break;
    case Target::Kind::Tuple:
      for (const Target& item : target.items) visit_target(item, symbols, as_parameter);
      break;
    case Target::Kind::NamespaceAttr: symbols.load(target.name); break;
  }
}

void analyze_nested(Body& body, const Symbols& symbols);

// A nested frame: its own table, whose parent is the enclosing frame's complete table; then the
// frames nested in it.
UnboundNames nested_frame(const Symbols& parent, const std::vector<const Target*>& parameters,
                          const std::vector<std::string>& named_parameters, const std::vector<const Expr*>& expressions,
                          Body& body) {
  Symbols symbols;
  symbols.parent = &parent;
  for (const Target* target : parameters) visit_target(*target, symbols, true);
  for (const std::string& name : named_parameters) symbols.parameter(name);
  for (const Expr* expr : expressions) visit_expr(*expr, symbols);
  visit_frame(body, symbols);
  analyze_nested(body, symbols);
  return symbols.unbound();
}

void analyze_macro(MacroDefinition& macro, const Symbols& parent) {
  std::vector<std::string> parameters = macro.params;
  if (macro.uses_caller) parameters.push_back("caller");
  if (macro.uses_kwargs) parameters.push_back("kwargs");
  if (macro.uses_varargs) parameters.push_back("varargs");
  std::vector<const Expr*> defaults;
  for (const ExprPtr& value : macro.defaults) defaults.push_back(value.get());
  macro.unbound = nested_frame(parent, {}, parameters, defaults, macro.body);
}

// The statements of one frame, in order (jinja2's FrameSymbolVisitor); frames nested in them are
// analyzed once this frame's table is complete (analyze_nested).
void visit_stmt(const Stmt& stmt, Symbols& symbols) {
  switch (stmt.kind) {
    case Stmt::Kind::Output: visit_expr(*static_cast<const OutputStmt&>(stmt).value, symbols); break;
    case Stmt::Kind::If: {
      const auto& node = static_cast<const IfStmt&>(stmt);
      visit_expr(*node.branches.front().first, symbols);
      Symbols body = symbols.branch();
      visit_frame(node.branches.front().second, body);
      // jinja2 nests elif branches as Ifs of their own, visited one after the other (each with an
      // empty elif list and else, which add nothing).
      Symbols elifs = symbols.branch();
      for (size_t i = 1; i < node.branches.size(); ++i) {
        visit_expr(*node.branches[i].first, elifs);
        Symbols branch = elifs.branch();
        visit_frame(node.branches[i].second, branch);
        elifs.branch_update({&branch});
      }
      Symbols otherwise = symbols.branch();
      visit_frame(node.else_body, otherwise);
      symbols.branch_update({&body, &elifs, &otherwise});
      break;
    }
    case Stmt::Kind::For: visit_expr(*static_cast<const ForStmt&>(stmt).iterable, symbols); break;
    case Stmt::Kind::Set: {
      const auto& node = static_cast<const SetStmt&>(stmt);
      visit_expr(*node.value, symbols);
      visit_target(node.target, symbols, false);
      break;
    }
    case Stmt::Kind::SetBlock: visit_target(static_cast<const SetBlockStmt&>(stmt).target, symbols, false); break;
    case Stmt::Kind::Macro: symbols.store(static_cast<const MacroStmt&>(stmt).macro.name); break;
    case Stmt::Kind::CallBlock: visit_expr(*static_cast<const CallBlockStmt&>(stmt).call, symbols); break;
    case Stmt::Kind::FilterBlock: visit_expr(*static_cast<const FilterBlockStmt&>(stmt).filter, symbols); break;
    case Stmt::Kind::With:
      for (const ExprPtr& value : static_cast<const WithStmt&>(stmt).values) visit_expr(*value, symbols);
      break;
    default: break;
  }
}

void analyze_nested_stmt(Stmt& stmt, const Symbols& symbols) {
  switch (stmt.kind) {
    case Stmt::Kind::If: {
      auto& node = static_cast<IfStmt&>(stmt);
      for (auto& branch : node.branches) analyze_nested(branch.second, symbols);
      analyze_nested(node.else_body, symbols);
      break;
    }
    case Stmt::Kind::For: {
      auto& node = static_cast<ForStmt&>(stmt);
      node.body_unbound = nested_frame(symbols, {&node.target}, {"loop"}, {}, node.body);
      node.else_unbound = nested_frame(symbols, {}, {}, {}, node.else_body);
      break;
    }
    case Stmt::Kind::SetBlock: {
      auto& node = static_cast<SetBlockStmt&>(stmt);
      node.unbound = nested_frame(symbols, {}, {}, {}, node.body);
      break;
    }
    case Stmt::Kind::Macro: analyze_macro(static_cast<MacroStmt&>(stmt).macro, symbols); break;
    case Stmt::Kind::CallBlock: analyze_macro(static_cast<CallBlockStmt&>(stmt).caller, symbols); break;
    case Stmt::Kind::FilterBlock: {
      auto& node = static_cast<FilterBlockStmt&>(stmt);
      node.unbound = nested_frame(symbols, {}, {}, {node.filter.get()}, node.body);
      break;
    }
    case Stmt::Kind::With: {
      auto& node = static_cast<WithStmt&>(stmt);
      std::vector<const Target*> targets;
      for (const Target& target : node.targets) targets.push_back(&target);
      node.unbound = nested_frame(symbols, targets, {}, {}, node.body);
      break;
    }
    case Stmt::Kind::Generation: {
      auto& node = static_cast<BodyStmt&>(stmt);
      node.unbound = nested_frame(symbols, {}, {}, {}, node.body);
      break;
    }
    case Stmt::Kind::Block: {
      // A block is a function of its own, resolving names in the context (no enclosing frame).
      auto& node = static_cast<BlockStmt&>(stmt);
      Symbols own;
      visit_frame(node.body, own);
      node.unbound = own.unbound();
      analyze_nested(node.body, own);
      break;
    }
    default: break;
  }
}

void visit_frame(const Body& body, Symbols& symbols) {
  for (const StmtPtr& stmt : body) visit_stmt(*stmt, symbols);
}

void analyze_nested(Body& body, const Symbols& symbols) {
  for (StmtPtr& stmt : body) analyze_nested_stmt(*stmt, symbols);
}

}  // namespace

void analyze_scopes(TemplateProgram& program) {
  Symbols root;
  visit_frame(program.body, root);
  program.unbound = root.unbound();
  analyze_nested(program.body, root);
}

}  // namespace finetune::jinja
