// meshwork: the command-line program. Only main decides the exit code.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return meshwork::cli::run(args, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "meshwork: internal error: " << e.what() << '\n';
    return 3;
  }
}
