// The repository is self-contained: every file a source comment or a document cites is in it
// (issue 24). A clone has no ../shared/: the architecture, the style guide and the reference data
// the code cites live in docs/.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
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
    if (rel.rfind(skip, 0) == 0) return rel == "fuzz/corpus/SOURCES.md";
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

TEST(Docs, TheSourceTreeIsFound) {
  ASSERT_TRUE(fs::exists(kSource / "docs" / "DESIGN.md"));
  EXPECT_GT(cited_from_files().size(), 300u);
}

TEST(Docs, NoFileCitesOneOutsideTheRepository) {
  const std::regex markdown_file(R"(([A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]*[A-Za-z0-9_-]\.md\b)");
  const std::regex bare_reference(R"((^|[^/A-Za-z0-9_.-])(published-runs|simgrid-3\.32-notes)\b)");
  std::vector<std::string> problems;
  for (const fs::path& file : cited_from_files()) {
    std::istringstream lines(read(file));
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      const std::string where = repo_path(file) + ":" + std::to_string(number) + ": ";
      if (line.find("../shared") != std::string::npos) problems.push_back(where + "cites ../shared/, which a clone does not have");
      if (line.find(".md") == std::string::npos && line.find("published-runs") == std::string::npos &&
          line.find("simgrid-3") == std::string::npos) {
        continue;  // std::regex is slow; most lines cite nothing
      }
      if (std::regex_search(line, bare_reference)) problems.push_back(where + "cites a reference file by name alone; write docs/reference/NAME.md");
      for (auto m = std::sregex_iterator(line.begin(), line.end(), markdown_file); m != std::sregex_iterator(); ++m) {
        const std::string token = m->str();
        if (!resolves(file, token) && !is_external(line, token)) problems.push_back(where + token + " is not in the repository");
      }
    }
  }
  for (const std::string& p : problems) ADD_FAILURE() << p;
}

TEST(Docs, EveryReadmeLinkAndPathResolves) {
  const std::string readme = read(kSource / "README.md");
  std::vector<std::string> problems;
  const std::regex link(R"(\]\(([^)#\s]+)[^)]*\))");
  for (auto m = std::sregex_iterator(readme.begin(), readme.end(), link); m != std::sregex_iterator(); ++m) {
    const std::string target = (*m)[1].str();
    if (target.rfind("http", 0) == 0) continue;
    if (!fs::exists(kSource / target)) problems.push_back("link " + target);
  }
  // Paths into the repository written in the text or in commands: scenarios/x.yaml, docs/..., a
  // folder, or a source's stem (models/layer_comm). Placeholders (<preset>, TARGET, globs) and
  // what a build makes are not checked.
  const std::regex path(R"((^|[\s`(])((docs|bench|scripts|scenarios|tests|models|plan|sim|exec|kernels|topology|report|cli|gui|fuzz|cmake)/[A-Za-z0-9_./-]*))");
  for (auto m = std::sregex_iterator(readme.begin(), readme.end(), path); m != std::sregex_iterator(); ++m) {
    std::string target = (*m)[2].str();
    while (!target.empty() && (target.back() == '.' || target.back() == ',')) target.pop_back();
    if (std::regex_search(target, std::regex("[A-Z]{4,}|\\*"))) continue;
    const bool found = fs::exists(kSource / target) || fs::exists(kSource / (target + ".hpp")) || fs::exists(kSource / (target + ".cpp"));
    if (!found) problems.push_back("path " + target);
  }
  for (const std::string& p : problems) ADD_FAILURE() << "README.md: " << p << " is not in the repository";
}

}  // namespace
