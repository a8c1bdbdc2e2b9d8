// The parsed form of a Jinja template: statements holding expressions, each knowing where in the
// template it was written so that errors can say so.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tessera/jinja/lexer.h"
#include "tessera/jinja/value.h"

namespace tessera::jinja {

enum class ExprKind {
  kConstant,   // constant
  kName,       // name
  kList,       // [operands...]
  kTuple,      // (operands...)
  kDict,       // {operands[0]: operands[1], operands[2]: operands[3], ...}
  kAttribute,  // operands[0].name
  kItem,       // operands[0][operands[1]]
  kSlice,      // operands[0][operands[1]:operands[2]:operands[3]], each bound possibly null
  kCall,       // operands[0](args, kwargs)
  kFilter,     // operands[0] | name(args, kwargs)
  kTest,       // operands[0] is name(args, kwargs)
  kNegative,   // -operands[0]
  kPositive,   // +operands[0]
  kNot,        // not operands[0]
  kBinary,     // operands[0] name operands[1], name one of + - * / // % ** ~
  kAnd,        // operands[0] and operands[1]
  kOr,         // operands[0] or operands[1]
  kCompare,    // operands[0] comparisons[0] operands[1] comparisons[1] operands[2] ...
  kCondition,  // operands[0] if operands[1] else operands[2], the else possibly null
};

struct Expr {
  ExprKind kind;
  Position position;
  int height = 1;  // of the tree below, this node included
  std::string name;
  Value constant;
  std::vector<std::unique_ptr<Expr>> operands;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> comparisons;  // ==, !=, <, <=, >, >=, in, not in
};

using ExprPtr = std::unique_ptr<Expr>;

struct Stmt;
using Body = std::vector<Stmt>;

struct TextStmt {
  std::string text;
};

struct PrintStmt {
  ExprPtr value;
};

struct IfStmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body otherwise;
};

struct ForStmt {
  std::vector<std::string> targets;
  bool unpacks = false;  // the targets are a tuple, even of one name
  ExprPtr iterable;
  ExprPtr condition;  // for x in xs if condition; may be null
  Body body;
  Body otherwise;  // runs when nothing was iterated
};

// {% set a = v %}, {% set a, b = v %}, {% set ns.attr = v %} or {% set a %}body{% endset %}.
struct SetStmt {
  std::vector<std::string> targets;
  bool unpacks = false;
  std::string attribute;  // set on the namespace named targets[0] when not empty
  ExprPtr value;          // null for a block set, which takes what `body` renders
  Body body;
};

struct MacroStmt {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // each with its default or null
  Body body;
};

struct LoopControlStmt {
  bool is_break;
};

struct Stmt {
  Position position;
  std::variant<TextStmt, PrintStmt, IfStmt, ForStmt, SetStmt, MacroStmt, LoopControlStmt> node;
};

}  // namespace tessera::jinja
