// The repository is self-contained: every file a source comment or a document cites is in it
// (issue 24). A clone has no ../shared/: the architecture, the style guide and the reference data
// the code cites live in docs/.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <cctype>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kSource = MESHWORK_SOURCE_DIR;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string repo_path(const fs::path& path) { return fs::relative(path, kSource).generic_string(); }

// What a reader of this repository writes: code, build files, scripts, scenarios and our own
// documents. Left out: build trees, the fuzz corpora (inputs, not text), golden outputs, and the
// verbatim copies under docs/reference/, which cite files of the projects they were copied from.
bool is_cited_from(const fs::path& path) {
  const std::string rel = repo_path(path);
  for (const char* skip : {"build", ".git", "fuzz/corpus/", "tests/golden/", "docs/reference/"}) {
    if (rel.rfind(skip, 0) == 0) return false;
  }
  const std::string ext = path.extension().string();
  static const std::set<std::string> kExtensions = {".cpp", ".hpp", ".cu", ".cuh", ".cmake", ".sh", ".yaml", ".md", ".py", ".in"};
  return kExtensions.count(ext) || path.filename() == "CMakeLists.txt" || rel.rfind("scripts/", 0) == 0 || rel.rfind(".ci/", 0) == 0;
}

std::vector<fs::path> cited_from_files() {
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(kSource); it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = repo_path(it->path());
    if (it->is_directory() && (rel.rfind("build", 0) == 0 || rel == ".git" || rel == "fuzz/corpus")) {
      it.disable_recursion_pending();
      continue;
    }
    // This file names what it looks for.
    if (it->is_regular_file() && is_cited_from(it->path()) && rel != "tests/docs/citations_test.cpp") files.push_back(it->path());
  }
  // The corpora's own account of where they came from is ours, and read.
  files.push_back(kSource / "fuzz/corpus/SOURCES.md");
  std::sort(files.begin(), files.end());
  return files;
}

// Documents of other projects cited by their own path, with the project that holds them.
bool is_external(const std::string& line, const std::string& token) {
  return token == "doc/PERFORMANCE.md" && line.find("nccl-tests") != std::string::npos;
}

bool resolves(const fs::path& from_file, const std::string& token) {
  return fs::exists(kSource / token) || fs::exists(from_file.parent_path() / token);
}

bool is_path_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/'; }

// Every "x/y.md" in `line` (std::regex trips GCC 12's -Wmaybe-uninitialized under the asan preset).
std::vector<std::string> markdown_files(const std::string& line) {
  std::vector<std::string> out;
  for (std::size_t at = line.find(".md"); at != std::string::npos; at = line.find(".md", at + 3)) {
    const std::size_t end = at + 3;
    if (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '_')) continue;
    std::size_t begin = at;
    while (begin > 0 && is_path_char(line[begin - 1])) --begin;
    if (begin < at) out.push_back(line.substr(begin, end - begin));
  }
  return out;
}

// "published-runs" or "simgrid-3.32-notes" not preceded by a path.
bool bare_reference(const std::string& line) {
  for (const char* name : {"published-runs", "simgrid-3.32-notes"}) {
    for (std::size_t at = line.find(name); at != std::string::npos; at = line.find(name, at + 1)) {
      if (at == 0 || !is_path_char(line[at - 1])) return true;
    }
  }
  return false;
}

TEST(Docs, TheSourceTreeIsFound) {
  ASSERT_TRUE(fs::exists(kSource / "docs" / "DESIGN.md"));
  EXPECT_GT(cited_from_files().size(), 300u);
}

TEST(Docs, NoFileCitesOneOutsideTheRepository) {
  std::vector<std::string> problems;
  for (const fs::path& file : cited_from_files()) {
    std::istringstream lines(read(file));
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      const std::string where = repo_path(file) + ":" + std::to_string(number) + ": ";
      if (line.find("../shared") != std::string::npos) problems.push_back(where + "cites ../shared/, which a clone does not have");
      if (bare_reference(line)) problems.push_back(where + "cites a reference file by name alone; write docs/reference/NAME.md");
      for (const std::string& token : markdown_files(line)) {
        if (!resolves(file, token) && !is_external(line, token)) problems.push_back(where + token + " is not in the repository");
      }
    }
  }
  for (const std::string& p : problems) ADD_FAILURE() << p;
}

TEST(Docs, EveryReadmeLinkAndPathResolves) {
  const std::string readme = read(kSource / "README.md");
  std::vector<std::string> problems;
  for (std::size_t at = readme.find("]("); at != std::string::npos; at = readme.find("](", at + 2)) {
    std::size_t end = at + 2;
    while (end < readme.size() && readme[end] != ')' && readme[end] != '#' && readme[end] != ' ') ++end;
    const std::string target = readme.substr(at + 2, end - at - 2);
    if (target.empty() || target.rfind("http", 0) == 0) continue;
    if (!fs::exists(kSource / target)) problems.push_back("link " + target);
  }
  // Paths into the repository written in the text or in commands: scenarios/x.yaml, docs/..., a
  // folder, or a source's stem (models/layer_comm). Placeholders (<preset>, TARGET, globs) and
  // what a build makes are not checked.
  for (const char* dir : {"docs", "bench", "scripts", "scenarios", "tests", "models", "plan", "sim", "exec", "kernels",
                          "topology", "report", "cli", "gui", "fuzz", "cmake"}) {
    const std::string prefix = std::string(dir) + "/";
    for (std::size_t at = readme.find(prefix); at != std::string::npos; at = readme.find(prefix, at + 1)) {
      if (at > 0 && !std::isspace(static_cast<unsigned char>(readme[at - 1])) && readme[at - 1] != '`' && readme[at - 1] != '(') continue;
      std::size_t end = at;
      while (end < readme.size() && is_path_char(readme[end])) ++end;
      std::string target = readme.substr(at, end - at);
      while (!target.empty() && (target.back() == '.' || target.back() == ',')) target.pop_back();
      if (end < readme.size() && (readme[end] == '*' || readme[end] == '<')) continue;  // a glob or a placeholder
      int capitals = 0, run = 0;
      for (char c : target) {
        run = std::isupper(static_cast<unsigned char>(c)) ? run + 1 : 0;
        capitals = std::max(capitals, run);
      }
      if (capitals >= 4) continue;  // TARGET, PLAN
      const bool found = fs::exists(kSource / target) || fs::exists(kSource / (target + ".hpp")) || fs::exists(kSource / (target + ".cpp"));
      if (!found) problems.push_back("path " + target);
    }
  }
  for (const std::string& p : problems) ADD_FAILURE() << "README.md: " << p << " is not in the repository";
}

}  // namespace
