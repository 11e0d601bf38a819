// Host-side helpers for the emulator test kernels (only compiled with ascendc_emu.h).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace drv {
inline std::vector<uint8_t> read_file(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) { std::fprintf(stderr, "driver: cannot open %s\n", path); std::exit(2); }
  std::fseek(f, 0, SEEK_END);
  long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  std::vector<uint8_t> v((size_t)n + 64);  // + slack, host side only
  if (n && std::fread(v.data(), 1, (size_t)n, f) != (size_t)n) { std::fprintf(stderr, "driver: short read %s\n", path); std::exit(2); }
  std::fclose(f);
  return v;
}
inline void write_file(const char* path, const void* p, size_t n) {
  FILE* f = std::fopen(path, "wb");
  if (!f) { std::fprintf(stderr, "driver: cannot write %s\n", path); std::exit(2); }
  std::fwrite(p, 1, n, f);
  std::fclose(f);
}
inline uint32_t arg(int argc, char** argv, int i) {
  if (i >= argc) { std::fprintf(stderr, "driver: missing argument %d\n", i); std::exit(2); }
  return (uint32_t)std::strtoul(argv[i], nullptr, 10);
}
}  // namespace drv
