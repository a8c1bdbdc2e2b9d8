#include "tessera/jinja/renderer.h"

#include <fmt/format.h>

#include <ctime>
#include <memory>
#include <unordered_map>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/jinja/access.h"
#include "tessera/jinja/filters.h"
#include "tessera/jinja/limits.h"
#include "tessera/jinja/operators.h"

namespace tessera::jinja {

namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>()(text); }
};

struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent_scope) : parent(std::move(parent_scope)) {}
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value, StringHash, std::equal_to<>> variables;
};

using ScopePtr = std::shared_ptr<Scope>;

Value lookup(const ScopePtr& scope, const std::string& name) {
  for (const Scope* s = scope.get(); s; s = s->parent.get()) {
    const auto it = s->variables.find(name);
    if (it != s->variables.end()) return it->second;
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

// Assigns `value` to the targets, unpacking it when there are several, as Python does.
void assign(Scope& scope, const std::vector<std::string>& targets, bool unpacks,
            const Value& value) {
  if (!unpacks) {
    scope.variables[targets[0]] = value;
    return;
  }
  const std::vector<Value> parts = iterate(value);
  check(parts.size() <= targets.size(), "too many values to unpack (expected {})", targets.size());
  check(parts.size() >= targets.size(), "not enough values to unpack (expected {}, got {})",
        targets.size(), parts.size());
  for (size_t i = 0; i < targets.size(); ++i) scope.variables[targets[i]] = parts[i];
}

Value loop_variable(const std::vector<Value>& items, size_t i) {
  const int64_t n = int64_t(items.size()), index = int64_t(i);
  return Value::dict({
      {"index", index + 1},
      {"index0", index},
      {"revindex", n - index},
      {"revindex0", n - index - 1},
      {"first", i == 0},
      {"last", index == n - 1},
      {"length", n},
      {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
      {"nextitem", index + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
      {"depth", int64_t{1}},
      {"depth0", int64_t{0}},
      {"cycle", Value::callable("loop.cycle",
                                [i](CallArgs& args) {
                                  check(!args.positional.empty(), "loop.cycle() needs values");
                                  return args.positional[i % args.positional.size()];
                                })},
  });
}

class Renderer {
 public:
  explicit Renderer(const BudgetLimits& limits) : budget_(limits) {}

  std::string render(const Body& program, const Value& context) {
    auto globals = std::make_shared<Scope>(nullptr);
    define_globals(*globals);
    auto variables = std::make_shared<Scope>(globals);
    for (const auto& [name, value] : context.as_dict().entries())
      variables->variables[name] = value;
    auto root = std::make_shared<Scope>(variables);
    std::string output;
    out_ = &output;
    exec_body(program, root);
    return output;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  // Counts one level of evaluation for as long as it lives: what bounds the stack.
  class Descend {
   public:
    explicit Descend(Renderer& renderer) : renderer_(renderer) {
      renderer_.budget_.step();
      check(renderer_.depth_ < kMaxEvalDepth,
            "the template nests more than {} levels deep as it renders", kMaxEvalDepth);
      ++renderer_.depth_;
    }
    ~Descend() { --renderer_.depth_; }

   private:
    Renderer& renderer_;
  };

  void emit(std::string_view text) {
    check(out_->size() + text.size() <= kMaxOutputBytes,
          "the rendered template would pass {} bytes", kMaxOutputBytes);
    out_->append(text);
  }

  // What `body` renders, as a string rather than output.
  std::string capture(const Body& body, const ScopePtr& scope) {
    std::string captured;
    std::string* const saved = std::exchange(out_, &captured);
    struct Restore {
      Renderer& renderer;
      std::string* saved;
      ~Restore() { renderer.out_ = saved; }
    } restore{*this, saved};
    exec_body(body, scope);
    return captured;
  }

  Flow exec_body(const Body& body, const ScopePtr& scope) {
    for (const Stmt& stmt : body) {
      const Flow flow = exec(stmt, scope);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& stmt, const ScopePtr& scope) {
    Descend descend(*this);
    try {
      return std::visit([&](const auto& node) { return exec_node(node, scope); }, stmt.node);
    } catch (const TemplateError&) {
      throw;
    } catch (const Error& e) {
      fail_at(stmt.position, e.what());
    }
  }

  Flow exec_node(const TextStmt& text, const ScopePtr&) {
    emit(text.text);
    return Flow::kNormal;
  }

  Flow exec_node(const PrintStmt& print, const ScopePtr& scope) {
    const Value value = eval(*print.value, scope);
    if (value.is_string()) {
      emit(value.as_string());
    } else {
      emit(to_str(value));
    }
    return Flow::kNormal;
  }

  Flow exec_node(const IfStmt& stmt, const ScopePtr& scope) {
    for (const auto& [condition, body] : stmt.branches) {
      if (truthy(eval(*condition, scope))) return exec_body(body, scope);
    }
    return exec_body(stmt.otherwise, scope);
  }

  Flow exec_node(const ForStmt& loop, const ScopePtr& scope) {
    std::vector<Value> items = iterate(eval(*loop.iterable, scope));
    if (loop.condition) {
      std::vector<Value> kept;
      for (Value& item : items) {
        auto filter_scope = std::make_shared<Scope>(scope);
        assign(*filter_scope, loop.targets, loop.unpacks, item);
        if (truthy(eval(*loop.condition, filter_scope))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      budget_.loop_iteration();
      auto iteration = std::make_shared<Scope>(scope);
      assign(*iteration, loop.targets, loop.unpacks, items[i]);
      iteration->variables["loop"] = loop_variable(items, i);
      if (exec_body(loop.body, iteration) == Flow::kBreak) break;
    }
    if (!items.empty()) return Flow::kNormal;
    return exec_body(loop.otherwise, std::make_shared<Scope>(scope));
  }

  Flow exec_node(const SetStmt& set, const ScopePtr& scope) {
    const Value value =
        set.value ? eval(*set.value, scope)
                  : make_string(budget_, capture(set.body, std::make_shared<Scope>(scope)));
    if (set.attribute.empty()) {
      assign(*scope, set.targets, set.unpacks, value);
      return Flow::kNormal;
    }
    const Value target = lookup(scope, set.targets[0]);
    check(target.kind() == Value::Kind::kNamespace,
          "cannot set '{}.{}': only a namespace() takes attributes, and '{}' is a {}",
          set.targets[0], set.attribute, set.targets[0], type_name(target));
    target.as_namespace().set(set.attribute, value);
    return Flow::kNormal;
  }

  Flow exec_node(const MacroStmt& macro, const ScopePtr& scope) {
    // The macro holds its scope weakly: the scope holds the macro.
    scope->variables[macro.name] = Value::callable(
        macro.name, [this, &macro, defined_in = std::weak_ptr<Scope>(scope)](CallArgs& args) {
          return call_macro(macro, defined_in, args);
        });
    return Flow::kNormal;
  }

  Flow exec_node(const LoopControlStmt& control, const ScopePtr&) {
    return control.is_break ? Flow::kBreak : Flow::kContinue;
  }

  Value call_macro(const MacroStmt& macro, const std::weak_ptr<Scope>& defined_in,
                   const CallArgs& args) {
    const ScopePtr parent = defined_in.lock();
    check(parent != nullptr, "macro '{}' was called after the block that defined it ended",
          macro.name);
    check(macro_depth_ < kMaxMacroDepth, "macro '{}' was called more than {} levels deep",
          macro.name, kMaxMacroDepth);
    ++macro_depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{macro_depth_};
    check(args.positional.size() <= macro.params.size(),
          "macro '{}' takes at most {} arguments ({} given)", macro.name, macro.params.size(),
          args.positional.size());
    auto scope = std::make_shared<Scope>(parent);
    std::vector<bool> given(macro.params.size());
    for (size_t i = 0; i < args.positional.size(); ++i) {
      scope->variables[macro.params[i].first] = args.positional[i];
      given[i] = true;
    }
    for (const auto& [name, value] : args.keyword) {
      size_t i = 0;
      while (i < macro.params.size() && macro.params[i].first != name) ++i;
      check(i < macro.params.size(), "macro '{}' takes no argument '{}'", macro.name, name);
      check(!given[i], "macro '{}' got two values for '{}'", macro.name, name);
      scope->variables[name] = value;
      given[i] = true;
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      if (given[i]) continue;
      const auto& [name, default_value] = macro.params[i];
      scope->variables[name] = default_value
                                   ? eval(*default_value, scope)
                                   : Value::undefined(fmt::format(
                                         "macro '{}' was called without '{}'", macro.name, name));
    }
    return make_string(budget_, capture(macro.body, scope));
  }

  Value eval(const Expr& expr, const ScopePtr& scope) {
    Descend descend(*this);
    try {
      return eval_node(expr, scope);
    } catch (const TemplateError&) {
      throw;
    } catch (const Error& e) {
      fail_at(expr.position, e.what());
    }
  }

  Value eval_or_undefined(const ExprPtr& expr, const ScopePtr& scope) {
    return expr ? eval(*expr, scope) : Value();
  }

  CallArgs eval_args(const Expr& expr, const ScopePtr& scope) {
    CallArgs args;
    for (const ExprPtr& arg : expr.args) args.positional.push_back(eval(*arg, scope));
    for (const auto& [name, arg] : expr.kwargs) args.keyword.emplace_back(name, eval(*arg, scope));
    return args;
  }

  std::vector<Value> eval_all(const std::vector<ExprPtr>& exprs, const ScopePtr& scope) {
    std::vector<Value> values;
    for (const ExprPtr& expr : exprs) values.push_back(eval(*expr, scope));
    budget_.items(int64_t(values.size()));
    return values;
  }

  Value eval_node(const Expr& expr, const ScopePtr& scope) {
    const auto operand = [&](size_t i) { return eval(*expr.operands[i], scope); };
    switch (expr.kind) {
      case ExprKind::kConstant:
        return expr.constant;
      case ExprKind::kName:
        return lookup(scope, expr.name);
      case ExprKind::kList:
        return Value::list(eval_all(expr.operands, scope));
      case ExprKind::kTuple:
        return Value::tuple(eval_all(expr.operands, scope));
      case ExprKind::kDict:
        return eval_dict(expr, scope);
      case ExprKind::kAttribute:
        return get_attribute(operand(0), expr.name, budget_);
      case ExprKind::kItem:
        return get_item(operand(0), operand(1), budget_);
      case ExprKind::kSlice:
        return get_slice(operand(0), eval_or_undefined(expr.operands[1], scope),
                         eval_or_undefined(expr.operands[2], scope),
                         eval_or_undefined(expr.operands[3], scope), budget_);
      case ExprKind::kCall:
        return eval_call(expr, scope);
      case ExprKind::kFilter:
        return apply_filter(expr.name, operand(0), eval_args(expr, scope), budget_);
      case ExprKind::kTest:
        return apply_test(expr.name, operand(0), eval_args(expr, scope));
      case ExprKind::kNegative:
      case ExprKind::kPositive:
        return unary_sign(operand(0), expr.kind == ExprKind::kNegative);
      case ExprKind::kNot:
        return !truthy(operand(0));
      case ExprKind::kBinary:
        return binary_operation(expr.name, operand(0), operand(1), budget_);
      case ExprKind::kAnd: {
        Value left = operand(0);
        return truthy(left) ? operand(1) : left;
      }
      case ExprKind::kOr: {
        Value left = operand(0);
        return truthy(left) ? left : operand(1);
      }
      case ExprKind::kCompare:
        return eval_compare(expr, scope);
      case ExprKind::kCondition:
        if (truthy(operand(1))) return operand(0);
        return expr.operands[2] ? operand(2)
                                : Value::undefined(
                                      "an if-expression without else had a false "
                                      "condition");
    }
    fail("an expression of unknown kind");
  }

  Value eval_dict(const Expr& expr, const ScopePtr& scope) {
    std::vector<Dict::Entry> entries;
    for (size_t i = 0; i < expr.operands.size(); i += 2) {
      const Value key = eval(*expr.operands[i], scope);
      check(key.is_string(), "dict keys must be strings in chat templates, not '{}'",
            type_name(key));
      entries.emplace_back(key.as_string(), eval(*expr.operands[i + 1], scope));
    }
    budget_.items(int64_t(entries.size()));
    return Value::dict(std::move(entries));
  }

  Value eval_call(const Expr& expr, const ScopePtr& scope) {
    const Value callee = eval(*expr.operands[0], scope);
    CallArgs args = eval_args(expr, scope);
    if (callee.is_undefined()) fail_undefined(callee);
    check(callee.kind() == Value::Kind::kCallable, "'{}' object is not callable",
          type_name(callee));
    return callee.as_callable().call(args);
  }

  Value eval_compare(const Expr& expr, const ScopePtr& scope) {
    Value left = eval(*expr.operands[0], scope);
    for (size_t i = 0; i < expr.comparisons.size(); ++i) {
      Value right = eval(*expr.operands[i + 1], scope);
      const std::string& op = expr.comparisons[i];
      bool holds;
      if (op == "==" || op == "!=") {
        holds = equal(left, right) == (op == "==");
      } else if (op == "in" || op == "not in") {
        holds = contains(right, left) == (op == "in");
      } else {
        const int order = compare(left, right);
        holds = op == "<"    ? order < 0
                : op == "<=" ? order <= 0
                : op == ">"  ? order > 0
                             : order >= 0;
      }
      if (!holds) return false;
      left = std::move(right);
    }
    return true;
  }

  void define_globals(Scope& globals) {
    globals.variables["range"] = Value::callable("range", [this](CallArgs& call) {
      const BoundArgs args("range", call, {"start", "stop", "step"});
      const bool one_bound = !args.has(1);
      const int64_t start = one_bound ? 0 : int_arg(args.get(0), "range() start");
      const int64_t stop = int_arg(args.get(one_bound ? 0 : 1), "range() stop");
      const int64_t step = args.has(2) ? int_arg(args.get(2), "range() step") : 1;
      check(step != 0, "range() step must not be zero");
      // In 128 bits, where no bound or step can overflow.
      const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
      const __int128 stride = step > 0 ? __int128{step} : -__int128{step};
      const __int128 count = span > 0 ? (span + stride - 1) / stride : 0;
      check(count <= kMaxRangeLength, "range() of {} numbers passes the limit of {}",
            int64_t(std::min<__int128>(count, INT64_MAX)), kMaxRangeLength);
      budget_.items(int64_t(count));
      std::vector<Value> numbers;
      for (int64_t i = 0; i < int64_t(count); ++i)
        numbers.emplace_back(int64_t(start + __int128{i} * step));
      return Value::list(std::move(numbers));
    });
    const auto keyword_dict = [this](std::string_view function, const CallArgs& call) {
      check(call.positional.size() <= 1, "{}() takes at most one positional argument", function);
      std::vector<Dict::Entry> entries;
      if (!call.positional.empty()) {
        const Value& source = call.positional[0];
        check(source.kind() == Value::Kind::kDict, "{}() takes a dict, not '{}'", function,
              type_name(source));
        entries = source.as_dict().entries();
      }
      for (const auto& entry : call.keyword) entries.push_back(entry);
      budget_.items(int64_t(entries.size()));
      return entries;
    };
    globals.variables["namespace"] =
        Value::callable("namespace", [this, keyword_dict](CallArgs& call) {
          namespaces_.push_back(std::make_unique<Namespace>());
          for (auto& [name, value] : keyword_dict("namespace", call))
            namespaces_.back()->set(name, value);
          return Value::namespace_ref(namespaces_.back().get());
        });
    globals.variables["dict"] = Value::callable(
        "dict", [keyword_dict](CallArgs& call) { return Value::dict(keyword_dict("dict", call)); });
    globals.variables["raise_exception"] =
        Value::callable("raise_exception", [](CallArgs& call) -> Value {
          const BoundArgs args("raise_exception", call, {"message"});
          throw Error(to_str(args.get(0)));
        });
    globals.variables["strftime_now"] = Value::callable("strftime_now", [this](CallArgs& call) {
      const BoundArgs args("strftime_now", call, {"format"});
      const std::string& format = string_arg(args.get(0), "strftime_now()'s format");
      check(format.size() <= 256, "strftime_now()'s format is longer than 256 bytes");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[4096];
      const size_t length = std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
      return make_string(budget_, std::string(buffer, length));
    });
  }

  // Declared first so that it goes last: values in the scopes point at its namespaces.
  std::vector<std::unique_ptr<Namespace>> namespaces_;
  Budget budget_;
  std::string* out_ = nullptr;
  int depth_ = 0;
  int macro_depth_ = 0;
};

}  // namespace

std::string render(const Body& program, const Value& context, const BudgetLimits& limits) {
  return Renderer(limits).render(program, context);
}

}  // namespace tessera::jinja
