// Text helpers both code generators share (codegen_cpp.cpp, codegen_cuda.cpp): float literals
// that read back exactly, a tensor as a comment names it, the comment every generated kernel
// starts with, the key under which identical kernels are emitted once, indentation.
//
// What it does not do: decide any code (each back end writes its own loops).
#pragma once

#include "compile/schedule.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace minigpt::compile {

// A float as a C literal that reads back to the same value; an infinity as `inf` (the back
// end's spelling: INFINITY, MG_INF), negated with a leading '-'.
std::string float_literal(float v, std::string_view inf);

// "'blocks.0.ln1.out' (32, 64)" (" i32" appended for integer tensors).
std::string describe_tensor(const Graph& g, int id);

// "// <name>", its ops, the eager ops it comes from, `params` (one per line), the tensors it
// keeps out of memory ("<kept_where> (never stored): N tensors, B bytes"), bytes and FLOPs.
std::string kernel_comment_text(const Graph& g, const Kernel& k, const std::vector<std::string>& params, std::string_view kept_where);

// What makes two kernels' code the same: the text with `kernel_name` blanked, comments dropped
// and the numbered temporaries (a prefix of temp_prefixes, "acc|tmp|row", then digits)
// renumbered by first use. Equal keys: one kernel may stand for the other (only the buffers
// passed differ).
std::string loops_key(std::string code, const std::string& kernel_name, const std::string& temp_prefixes);

// A generated kernel's leading comment lines ("// ..."), and the rest of its text.
std::pair<std::string, std::string> split_leading_comment(const std::string& text);

// Every line of text prefixed with indent.
std::string indent_text(const std::string& text, const std::string& indent);

}  // namespace minigpt::compile
