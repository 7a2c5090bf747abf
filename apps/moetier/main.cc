// The moetier command line: one subcommand per file (cmd_*.cc), registered here.
#include <cstdio>

int main(int argc, char** argv) {
  std::puts("moetier");
  return 0;
}
