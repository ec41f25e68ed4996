// Configure-time probe (tests/CMakeLists.txt): prints the ISAs this CPU runs, as a CMake list
// ("scalar;avx2;avx512"), with the very code active_isa() uses (core/isa.cpp, compiled in).
#include "core/isa.cpp"

#include <cstdio>

int main() {
  const char* sep = "";
  for (const minigpt::Isa isa : minigpt::supported_isas()) {
    std::printf("%s%s", sep, minigpt::isa_name(isa));
    sep = ";";
  }
  return 0;
}
