// The MINIGPT_ISA switch (isa.h): CPU feature tests and the parsing of the variable.
#include "core/isa.h"

#include "core/error.h"

#include <cstdlib>
#include <string>

namespace minigpt {

namespace {

constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512};

// "scalar avx2 avx512": the ISAs this CPU runs, for error messages.
std::string supported_list() {
  std::string s;
  for (const Isa isa : supported_isas()) s += (s.empty() ? "" : " ") + std::string(isa_name(isa));
  return s;
}

Isa best_supported() { return supported_isas().back(); }

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "unknown";
}

bool cpu_supports(Isa isa) {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return avx2;
    case Isa::Avx512: return avx512;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (const Isa isa : kAllIsas)
    if (cpu_supports(isa)) isas.push_back(isa);
  return isas;
}

Isa isa_from_env_value(const char* value) {
  if (value == nullptr || *value == '\0') return best_supported();
  for (const Isa isa : kAllIsas) {
    if (std::string(value) != isa_name(isa)) continue;
    MINIGPT_CHECK(cpu_supports(isa), "MINIGPT_ISA={}: this CPU does not support {} (it has: {})",
                  value, value, supported_list());
    return isa;
  }
  MINIGPT_FAIL("MINIGPT_ISA={}: unknown instruction set; use one of scalar, avx2, avx512 (this "
               "CPU has: {})",
               value, supported_list());
}

Isa active_isa() {
  // A throwing initialiser leaves the static unset, so every call reports the bad value again.
  static const Isa isa = isa_from_env_value(std::getenv("MINIGPT_ISA"));
  return isa;
}

}  // namespace minigpt
