// Python's string semantics on UTF-8 text, for the chat template engine: strings counted and cut
// in code points, Python's whitespace and case rules, and the spellings Python gives floats and
// strings in str(), repr() and json.dumps().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::jinja {

// The text as code points. A byte that is not part of well-formed UTF-8 becomes U+DC80..U+DCFF,
// as Python's surrogateescape does, so encoding the code points again gives back the same bytes.
std::u32string to_code_points(std::string_view text);
std::string to_utf8(std::u32string_view code_points);
void append_utf8(std::string& out, char32_t code_point);
size_t code_point_count(std::string_view text);

// str.isspace()
bool is_python_space(char32_t c);

// str.upper(), str.lower(), str.title(), str.capitalize(). Case is mapped for ASCII, Latin-1,
// Greek and Cyrillic letters; other letters are left as they are.
std::string python_upper(std::string_view text);
std::string python_lower(std::string_view text);
std::string python_title(std::string_view text);
std::string python_capitalize(std::string_view text);
// jinja2's title filter, which starts a word after whitespace or one of - ( { [ <, unlike
// str.title() which starts one after any character that is not a letter.
std::string jinja_title(std::string_view text);

// str.strip(chars), str.lstrip(chars), str.rstrip(chars): no chars strips whitespace.
std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                         bool right);
// str.split(sep, maxsplit): no sep splits at runs of whitespace; maxsplit < 0 has no limit.
std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      int64_t maxsplit);
// str.splitlines()
std::vector<std::string> python_splitlines(std::string_view text);

// repr() of a float: the shortest digits that read back as the same double, in positional
// notation from 1e-4 up to 1e16 (with ".0" when whole) and in exponent notation outside.
std::string python_float_repr(double value);
// repr() of a str: quoted in ' (or " when it holds ' but no "), with escapes.
std::string python_string_repr(std::string_view text);
// The text as a JSON string, escaped as json.dumps does; ensure_ascii escapes all non-ASCII.
void append_json_string(std::string& out, std::string_view text, bool ensure_ascii);

}  // namespace tessera::jinja
