// docs/troubleshooting.md promises "every warning the plugin prints": each NNF_WARN format in
// src/ must be documented there, and each warning text documented there must still exist in
// src/ (a reworded WARN otherwise leaves users searching for a message that never comes).
//
// The documented texts are the code spans in bold (**`...`**) and those in the first column of
// the doc's tables. They follow the format's own text: `<name>`, `%s` or `%d` where the format
// has conversions, and `...` for text left out, so a documented prefix ("listen on device %d:
// ...") covers the whole format. A message built elsewhere and logged with NNF_WARN("%s", ...)
// is found in the statements that build it.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_env.h"

namespace nnf {
namespace {

// A message pattern: literal characters (>= 0) and wildcards. In a source format, kText is a
// %s or %c and kNumber any other conversion. In the doc, kText and kNumber are placeholders,
// which stand for at least one conversion of the format, and kOmitted is `...`, which stands
// for any part of the format, possibly none.
constexpr int kText = -1;
constexpr int kNumber = -2;
constexpr int kOmitted = -3;
using Pattern = std::vector<int>;

bool literal(int item) {
  return item >= 0;
}

std::string readFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void appendLiteral(Pattern& pattern, char c) {
  // Whitespace runs compare as one space: the doc wraps long messages over lines.
  if (std::isspace(static_cast<unsigned char>(c))) {
    if (!pattern.empty() && pattern.back() == ' ') return;
    c = ' ';
  }
  pattern.push_back(static_cast<unsigned char>(c));
}

// Length of the printf conversion at text[pos] ('%' included), 0 when there is none.
size_t conversionLength(const std::string& text, size_t pos) {
  static const std::regex conversion(
      R"(^%[-+#0]*(\d+|\*)?(\.(\d+|\*))?(hh|h|ll|l|z|j|t|L)?[diouxXfFeEgGcspaA])");
  if (text[pos] != '%') return 0;
  std::smatch match;
  std::string rest = text.substr(pos, 16);
  return std::regex_search(rest, match, conversion) ? match.length(0) : 0;
}

int conversionItem(char type) {
  return type == 's' || type == 'c' ? kText : kNumber;
}

// A printf format from the source; consecutive conversions stay separate items ("%s%s%s%s"
// prints " (detail)" around the second one).
Pattern formatPattern(const std::string& format) {
  Pattern pattern;
  for (size_t i = 0; i < format.size();) {
    if (format.compare(i, 2, "%%") == 0) {
      appendLiteral(pattern, '%');
      i += 2;
    } else if (size_t length = conversionLength(format, i)) {
      pattern.push_back(conversionItem(format[i + length - 1]));
      i += length;
    } else {
      appendLiteral(pattern, format[i++]);
    }
  }
  return pattern;
}

// A documented text.
Pattern docPattern(const std::string& text) {
  Pattern pattern;
  for (size_t i = 0; i < text.size();) {
    size_t close = text[i] == '<' ? text.find('>', i) : std::string::npos;
    if (text.compare(i, 3, "...") == 0 || text.compare(i, 3, "…") == 0) {
      pattern.push_back(kOmitted);
      i += 3;
    } else if (close != std::string::npos) {
      pattern.push_back(kText);
      i = close + 1;
    } else if (size_t length = conversionLength(text, i)) {
      pattern.push_back(conversionItem(text[i + length - 1]));
      i += length;
    } else {
      appendLiteral(pattern, text[i++]);
    }
  }
  return pattern;
}

// Whether doc item `wild` may stand for format item `item`: a placeholder for conversions
// only, `...` for anything.
bool docCovers(int wild, int item) {
  if (wild == kOmitted) return true;
  if (wild == kNumber) return item == kNumber;
  return !literal(item);
}

// True when the documented pattern `doc` describes the format `format`: the doc's literal text
// is the format's, each placeholder stands for one or more of the format's conversions, and
// `...` for any part of the format. So "<error>" can never stand for "NULL output pointer".
bool documents(const Pattern& doc, const Pattern& format) {
  size_t n = doc.size(), m = format.size();
  // can(i, j, s): doc[i..] describes format[j..]; s: the wildcard doc[i] already stands for at
  // least one item (a placeholder must, `...` need not).
  std::vector<char> can((n + 1) * (m + 1) * 2, 0);
  auto at = [&](size_t i, size_t j, int s) -> char& { return can[(i * (m + 1) + j) * 2 + s]; };
  at(n, m, 0) = at(n, m, 1) = 1;
  for (size_t i = n + 1; i-- > 0;) {
    for (size_t j = m + 1; j-- > 0;) {
      if (i == n && j == m) continue;
      for (int s = 0; s < 2; ++s) {
        bool ok = false;
        if (i < n && !literal(doc[i])) {
          if (j < m && docCovers(doc[i], format[j])) ok = at(i, j + 1, 1);
          if (!ok && (s == 1 || doc[i] == kOmitted)) ok = at(i + 1, j, 0);
        } else if (i < n && j < m) {
          ok = doc[i] == format[j] && at(i + 1, j + 1, 0);
        }
        at(i, j, s) = ok;
      }
    }
  }
  return at(0, 0, 0);
}

// A string literal of the source (adjacent ones joined, as the compiler does).
struct Literal {
  std::string text;
  size_t statement;  // index of the statement it is in (';'-separated)
  bool warnFormat;   // the format argument of NNF_WARN
};

bool identifierChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

std::vector<Literal> scanLiterals(const std::string& code) {
  std::vector<Literal> literals;
  size_t statement = 0;
  bool joinable = false;   // only whitespace or comments since the last literal
  bool afterWarn = false;  // "NNF_WARN(" seen, its format not yet read
  for (size_t i = 0; i < code.size();) {
    char c = code[i];
    if (code.compare(i, 2, "//") == 0 || (c == '#' && (i == 0 || code[i - 1] == '\n'))) {
      i = code.find('\n', i);  // comments, and #include "..." which is no message
      if (i == std::string::npos) break;
    } else if (code.compare(i, 2, "/*") == 0) {
      i = code.find("*/", i + 2);
      if (i == std::string::npos) break;
      i += 2;
    } else if (c == '\'') {
      for (++i; i < code.size() && code[i] != '\''; ++i)
        if (code[i] == '\\') ++i;
      ++i;
      joinable = false;
    } else if (c == '"') {
      std::string text;
      for (++i; i < code.size() && code[i] != '"'; ++i) {
        if (code[i] == '\\' && i + 1 < code.size()) {
          char e = code[++i];
          text += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          text += code[i];
        }
      }
      ++i;
      if (joinable && !literals.empty()) {
        literals.back().text += text;
      } else {
        literals.push_back({text, statement, afterWarn});
        afterWarn = false;
      }
      joinable = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (code.compare(i, 8, "NNF_WARN") == 0 && (i == 0 || !identifierChar(code[i - 1])) &&
               !identifierChar(code[i + 8])) {
      afterWarn = true;
      joinable = false;
      i += 8;
    } else {
      if (c == ';') ++statement;
      if (c != '(') afterWarn = false;
      joinable = false;
      ++i;
    }
  }
  return literals;
}

bool hasLetters(const std::string& text) {
  Pattern pattern = formatPattern(text);
  return std::any_of(pattern.begin(), pattern.end(),
                     [](int c) { return literal(c) && std::isalpha(c); });
}

void listSources(const std::string& dir, std::vector<std::string>* out) {
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return;
  while (dirent* entry = readdir(handle)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    if (entry->d_type == DT_DIR) {
      listSources(path, out);
    } else if ((name.size() > 3 && name.compare(name.size() - 3, 3, ".cc") == 0) ||
               (name.size() > 2 && name.compare(name.size() - 2, 2, ".h") == 0)) {
      out->push_back(path);
    }
  }
  closedir(handle);
}

struct Format {
  std::string file;
  std::string text;
  Pattern pattern;
};

struct Source {
  std::vector<Format> warnFormats;  // NNF_WARN formats with text of their own
  // Messages built elsewhere and logged with NNF_WARN("%s", ...): in the files that do so, each
  // statement's literals, joined with "%s" where code sits between them.
  std::vector<Format> composed;
};

Source readSource() {
  Source source;
  std::string root = test::sourceDir() + "/src";
  std::vector<std::string> files;
  listSources(root, &files);
  std::sort(files.begin(), files.end());
  for (const std::string& path : files) {
    std::string file = path.substr(root.size() + 1);
    if (file.rfind("log/", 0) == 0) continue;  // the macro's own definition
    std::vector<Literal> literals = scanLiterals(readFile(path));
    bool composes = false;
    for (const Literal& literal : literals) {
      if (!literal.warnFormat) continue;
      if (hasLetters(literal.text))
        source.warnFormats.push_back({file, literal.text, formatPattern(literal.text)});
      else
        composes = true;
    }
    if (!composes) continue;
    for (size_t i = 0; i < literals.size();) {
      std::string text = literals[i].text;
      size_t j = i + 1;
      for (; j < literals.size() && literals[j].statement == literals[i].statement; ++j)
        text += "%s" + literals[j].text;
      if (hasLetters(text)) source.composed.push_back({file, text, formatPattern(text)});
      i = j;
    }
  }
  return source;
}

struct DocEntry {
  int line;
  std::string text;
  Pattern pattern;
};

// Bold code spans anywhere, and code spans in the first cell of a table row.
std::vector<DocEntry> readDocEntries(const std::string& doc) {
  std::vector<DocEntry> entries;
  auto add = [&](size_t at, const std::string& text) {
    int line = static_cast<int>(std::count(doc.begin(), doc.begin() + at, '\n')) + 1;
    entries.push_back({line, text, docPattern(text)});
  };
  static const std::regex bold(R"(\*\*`([^`]+)`\*\*)");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), bold); it != std::sregex_iterator();
       ++it)
    add(it->position(1), (*it)[1].str());
  static const std::regex span("`([^`]+)`");
  for (size_t start = 0; start < doc.size();) {
    size_t end = doc.find('\n', start);
    if (end == std::string::npos) end = doc.size();
    std::string line = doc.substr(start, end - start);
    if (line.rfind("| `", 0) == 0) {
      // The first cell ends at the first " | " outside a code span.
      size_t pos = 2;
      bool inSpan = false;
      for (; pos < line.size(); ++pos) {
        if (line[pos] == '`') inSpan = !inSpan;
        if (!inSpan && line.compare(pos, 3, " | ") == 0) break;
      }
      std::string cell = line.substr(0, pos);
      for (auto it = std::sregex_iterator(cell.begin(), cell.end(), span);
           it != std::sregex_iterator(); ++it)
        add(start + it->position(1), (*it)[1].str());
    }
    start = end + 1;
  }
  return entries;
}

class TroubleshootingDoc : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string doc = readFile(test::sourceDir() + "/docs/troubleshooting.md");
    ASSERT_FALSE(doc.empty()) << "docs/troubleshooting.md is missing";
    entries_ = readDocEntries(doc);
    source_ = readSource();
    // A scanner that finds nothing would pass everything.
    ASSERT_GT(entries_.size(), 50u);
    ASSERT_GT(source_.warnFormats.size(), 50u);
  }

  std::vector<DocEntry> entries_;
  Source source_;
};

TEST_F(TroubleshootingDoc, DocumentsEveryWarnFormatOfTheSource) {
  for (const Format& format : source_.warnFormats) {
    bool documented = std::any_of(entries_.begin(), entries_.end(), [&](const DocEntry& entry) {
      return documents(entry.pattern, format.pattern);
    });
    EXPECT_TRUE(documented) << "src/" << format.file << ": NNF_WARN(\"" << format.text
                            << "\") is not documented in docs/troubleshooting.md";
  }
}

TEST_F(TroubleshootingDoc, EveryDocumentedWarningExistsInTheSource) {
  for (const DocEntry& entry : entries_) {
    auto described = [&](const Format& format) { return documents(entry.pattern, format.pattern); };
    bool found = std::any_of(source_.warnFormats.begin(), source_.warnFormats.end(), described) ||
                 std::any_of(source_.composed.begin(), source_.composed.end(), described);
    EXPECT_TRUE(found) << "docs/troubleshooting.md:" << entry.line << ": `" << entry.text
                       << "` matches no NNF_WARN format in src/";
  }
}

// The matcher itself, on the cases the doc relies on and the ones it must refuse.
TEST(TroubleshootingDocMatcher, PlaceholdersStandForConversions) {
  EXPECT_TRUE(documents(docPattern("<call>: NULL output pointer"),
                        formatPattern("%s: NULL output pointer")));
  EXPECT_TRUE(documents(docPattern("a long\n  message %d"), formatPattern("a long message %zu")));
  EXPECT_TRUE(documents(docPattern("x of %zu failed: <error and detail>"),
                        formatPattern("x of %zu failed: %s%s%s%s")));
  EXPECT_TRUE(documents(docPattern("100% done"), formatPattern("100%% done")));
  // Never for the format's own words, and never for nothing.
  EXPECT_FALSE(documents(docPattern("reading the queue of device %d failed: <error>"),
                         formatPattern("%s: NULL output pointer")));
  EXPECT_FALSE(documents(docPattern("<call>: unexpected error: <what>"),
                         formatPattern("%s: unexpected error")));
  EXPECT_FALSE(documents(docPattern("<call>: unexpected error: <what>"),
                         formatPattern("device %d: completion error without context: %s")));
  EXPECT_FALSE(documents(docPattern("isend: invalid size %d or NULL request pointer"),
                         formatPattern("isend: invalid size %d")));
  EXPECT_FALSE(documents(docPattern("size %d"), formatPattern("size %s")));
}

TEST(TroubleshootingDocMatcher, EllipsisStandsForAnyPartOfTheFormat) {
  EXPECT_TRUE(
      documents(docPattern("<call>: unexpected error..."), formatPattern("%s: unexpected error")));
  EXPECT_TRUE(documents(docPattern("%s: refused FI_X=false: ...; more ..."),
                        formatPattern("%s: refused FI_X=false: %s (%d); more %s")));
  EXPECT_TRUE(documents(docPattern("listen on device %d: ..."),
                        formatPattern("listen on device %d: %s (%d bytes)")));
  EXPECT_FALSE(documents(docPattern("some words ..."), formatPattern("%s: NULL output pointer")));
}

}  // namespace
}  // namespace nnf
