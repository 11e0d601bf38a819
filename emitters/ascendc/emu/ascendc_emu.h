// ascendc_emu.h -- clean-room, header-only CPU emulator for the subset of the AscendC class API
// that a GEMM kernel needs.  Written from the documented semantics summarised in
// /work/shared/docs/ascendc.md (Huawei public docs); no Huawei code is copied.
// NOT validated on hardware: results mean "documented semantics as understood".
//
// Build:  g++ -std=c++17 -O1 -pthread -DEMU_ARCH=3510|2201 -include ascendc_emu.h kernel.cpp
//   EMU_ARCH 3510 = Ascend 950 profile (default), 2201 = Ascend 910B profile.
//   (EMU_CHIP_910B / EMU_CHIP_950 are accepted as aliases.)
// Errors: one line "ASCENDC_EMU_ERROR: ..." on stderr, exit code 3.
#pragma once
#include <array>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(EMU_CHIP_910B) && !defined(EMU_ARCH)
#define EMU_ARCH 2201
#endif
#if defined(EMU_CHIP_950) && !defined(EMU_ARCH)
#define EMU_ARCH 3510
#endif
#ifndef EMU_ARCH
#define EMU_ARCH 3510
#endif
#if EMU_ARCH != 2201 && EMU_ARCH != 3510
#error "EMU_ARCH must be 2201 (910B) or 3510 (950)"
#endif
#ifndef __NPU_ARCH__
#define __NPU_ARCH__ EMU_ARCH
#endif
#define ASCENDC_EMU 1
#define ASCENDC_CPU_DEBUG 1

// ---- device keyword shim (CANN CPU-debug style: keywords are empty) ----
#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __cube__
#define __vector__
#define __inout_pipe__(x)
#define __mix__(a, b)
#define __schedmode__(x)
#define GM_ADDR uint8_t*
#define ASCEND_IS_AIC (::emu::cur().is_aic)
#define ASCEND_IS_AIV (!::emu::cur().is_aic)
#define ASCEND_IS_NOT_AIC (!::emu::cur().is_aic)
#define ASCEND_IS_NOT_AIV (::emu::cur().is_aic)
#define KERNEL_TASK_TYPE_DEFAULT(x)

// =====================================================================================
// error reporting
// =====================================================================================
namespace emu {
inline std::mutex& fail_mutex() { static std::mutex m; return m; }
[[noreturn]] inline void fail(const char* fmt, ...) {
  std::lock_guard<std::mutex> lk(fail_mutex());
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fflush(stdout);
  fprintf(stderr, "ASCENDC_EMU_ERROR: %s\n", buf);
  fflush(stderr);
  std::_Exit(3);
}
}  // namespace emu

// =====================================================================================
// emulated floating-point storage types (bit layouts match torch's dtypes)
// =====================================================================================
namespace emu { namespace fp {
inline float b2f(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t f2b(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

struct Fmt { int ebits, mbits, bias; int kind; };  // kind 0: IEEE (inf+nan), 1: "fn" (all-ones=NaN, no inf), 2: no inf/nan (saturate)
// kind 1 (e4m3fn) overflow (incl. +-inf) saturates to +-448 like torch's cast; NaN -> 0x7F/0xFF
constexpr Fmt kHalf{5, 10, 15, 0}, kE4M3{4, 3, 7, 1}, kE5M2{5, 2, 15, 0}, kE2M1{2, 1, 1, 2};

inline double mf_max(Fmt f) {
  int emaxf = (1 << f.ebits) - 1;
  int mmax = (1 << f.mbits) - 1;
  if (f.kind == 0) return std::ldexp((double)((1 << f.mbits) + mmax), emaxf - 1 - f.bias - f.mbits);
  if (f.kind == 1) return std::ldexp((double)((1 << f.mbits) + mmax - 1), emaxf - f.bias - f.mbits);
  return std::ldexp((double)((1 << f.mbits) + mmax), emaxf - f.bias - f.mbits);
}
inline double mf_decode(uint32_t bits, Fmt f) {
  uint32_t sign = (bits >> (f.ebits + f.mbits)) & 1u;
  uint32_t e = (bits >> f.mbits) & ((1u << f.ebits) - 1u);
  uint32_t m = bits & ((1u << f.mbits) - 1u);
  uint32_t eall = (1u << f.ebits) - 1u;
  if (f.kind == 0 && e == eall) return m ? NAN : (sign ? -INFINITY : INFINITY);
  if (f.kind == 1 && e == eall && m == (1u << f.mbits) - 1u) return NAN;
  double v = e == 0 ? std::ldexp((double)m, 1 - f.bias - f.mbits)
                    : std::ldexp((double)((1u << f.mbits) + m), (int)e - f.bias - f.mbits);
  return sign ? -v : v;
}
inline uint32_t mf_encode_abs(double r, Fmt f) {  // r exactly representable, >= 0
  if (r == 0) return 0;
  int e2;
  std::frexp(r, &e2);
  int E = e2 - 1, emin = 1 - f.bias;
  if (E < emin) return (uint32_t)(r / std::ldexp(1.0, emin - f.mbits));
  uint32_t m = (uint32_t)(r / std::ldexp(1.0, E - f.mbits)) - (1u << f.mbits);
  return ((uint32_t)(E + f.bias) << f.mbits) | m;
}
// round-to-nearest-even encode
inline uint32_t mf_encode(float x, Fmt f) {
  uint32_t sbit = 1u << (f.ebits + f.mbits);
  uint32_t sign = std::signbit(x) ? sbit : 0;
  uint32_t eall = (1u << f.ebits) - 1u;
  uint32_t nan_enc = f.kind == 0 ? ((eall << f.mbits) | (1u << (f.mbits - 1))) : f.kind == 1 ? (sbit - 1) : (sbit - 1);
  uint32_t inf_enc = eall << f.mbits;
  double mx = mf_max(f);
  if (std::isnan(x)) return (f.kind == 2 ? (sign | mf_encode_abs(mx, f)) : (sign | nan_enc));
  double a = std::fabs((double)x);
  auto overflow = [&]() -> uint32_t {  // as torch: IEEE formats -> inf, "fn"/no-inf formats saturate to max
    if (f.kind == 0) return sign | inf_enc;
    return sign | mf_encode_abs(mx, f);
  };
  if (std::isinf(a)) return overflow();
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  int E = e - 1, emin = 1 - f.bias;
  if (E < emin) E = emin;
  double q = std::ldexp(1.0, E - f.mbits);
  double r = std::nearbyint(a / q) * q;
  if (r > mx) return overflow();
  return sign | mf_encode_abs(r, f);
}
inline uint16_t f2bf(float f) {
  uint32_t u = f2b(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
template <int KIND>
inline const float* table8() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[i] = (float)mf_decode((uint32_t)i, KIND == 0 ? kE4M3 : kE5M2);
    return a;
  }();
  return t.data();
}
}}  // namespace emu::fp

struct bfloat16_t {
  uint16_t bits;
  bfloat16_t() = default;
  bfloat16_t(float f) : bits(emu::fp::f2bf(f)) {}
  operator float() const { return emu::fp::b2f((uint32_t)bits << 16); }
  static bfloat16_t from_bits(uint16_t b) { bfloat16_t r; r.bits = b; return r; }
};
struct half {
  uint16_t bits;
  half() = default;
  half(float f) : bits((uint16_t)emu::fp::mf_encode(f, emu::fp::kHalf)) {}
  operator float() const { return (float)emu::fp::mf_decode(bits, emu::fp::kHalf); }
  static half from_bits(uint16_t b) { half r; r.bits = b; return r; }
};
struct fp8_e4m3fn_t {
  uint8_t bits;
  fp8_e4m3fn_t() = default;
  fp8_e4m3fn_t(float f) : bits((uint8_t)emu::fp::mf_encode(f, emu::fp::kE4M3)) {}
  operator float() const { return emu::fp::table8<0>()[bits]; }
};
struct fp8_e5m2_t {
  uint8_t bits;
  fp8_e5m2_t() = default;
  fp8_e5m2_t(float f) : bits((uint8_t)emu::fp::mf_encode(f, emu::fp::kE5M2)) {}
  operator float() const { return emu::fp::table8<1>()[bits]; }
};
// e8m0 (torch float8_e8m0fnu): value 2^(bits-127), 0xFF = NaN.
struct fp8_e8m0_t {
  uint8_t bits;
  fp8_e8m0_t() = default;
  fp8_e8m0_t(float f) {
    // as torch float8_e8m0fnu: sign ignored, exponent of |f| rounded half-up on the fp32 mantissa
    uint32_t u = emu::fp::f2b(f) & 0x7FFFFFFFu;
    if (std::isnan(f) || std::isinf(f)) { bits = 0xFF; return; }
    uint32_t e = (u >> 23) & 0xFF, m = u & 0x7FFFFF;
    if (m > 0x400000u || (m == 0x400000u && e != 0)) ++e;
    bits = (uint8_t)(e > 254 ? 0xFF : e);
  }
  operator float() const { return bits == 0xFF ? NAN : (float)std::ldexp(1.0, (int)bits - 127); }
};
// two e2m1 values per byte, element 0 in the low nibble (torch float4_e2m1fn_x2 order)
struct fp4x2_e2m1_t {
  uint8_t bits;
  float get(int i) const { return (float)emu::fp::mf_decode((bits >> (4 * i)) & 0xF, emu::fp::kE2M1); }
  void set(int i, float v) {
    uint8_t n = (uint8_t)emu::fp::mf_encode(v, emu::fp::kE2M1);
    bits = (uint8_t)((bits & ~(0xF << (4 * i))) | (n << (4 * i)));
  }
};
struct hifloat8_t { uint8_t bits; };  // storage only (encoding not emulated)

// =====================================================================================
// emulator core state
// =====================================================================================
namespace AscendC {
enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM, SPM, SHM, TSCM, C2PIPE2GM, MAX };
using QuePosition = TPosition;
}  // namespace AscendC

enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5, PIPE_V2, PIPE_FIX };

namespace emu {
// L0A_MX / L0B_MX: the 3510's MX scale slots (1/16 of L0A / L0B; a tile's scales live at its L0 address / 16)
enum Phys { P_GM, P_L1, P_L0A, P_L0B, P_L0C, P_UB, P_BT, P_FB, P_L0A_MX, P_L0B_MX, P_NUM };
inline const char* phys_name(int p) {
  static const char* n[] = {"GM", "L1", "L0A", "L0B", "L0C", "UB", "BT", "FB", "L0A_MX", "L0B_MX"};
  return n[p];
}
enum PipeIdx { PI_S, PI_V, PI_M, PI_MTE1, PI_MTE2, PI_MTE3, PI_FIX, PI_NUM };
inline const char* pipe_name(int p) {
  static const char* n[] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX"};
  return (p >= 0 && p < PI_NUM) ? n[p] : "?";
}
inline int pipe_index(pipe_t p) {
  switch (p) {
    case PIPE_S: return PI_S; case PIPE_V: return PI_V; case PIPE_M: return PI_M;
    case PIPE_MTE1: return PI_MTE1; case PIPE_MTE2: return PI_MTE2; case PIPE_MTE3: return PI_MTE3;
    case PIPE_FIX: return PI_FIX; default: return -1;
  }
}
inline Phys pos_phys(AscendC::TPosition p) {
  using AscendC::TPosition;
  switch (p) {
    case TPosition::GM: case TPosition::CO2: return P_GM;
    case TPosition::A1: case TPosition::B1: case TPosition::C1: case TPosition::TSCM: return P_L1;
    case TPosition::A2: return P_L0A;
    case TPosition::B2: return P_L0B;
    case TPosition::CO1: return P_L0C;
    case TPosition::C2: return P_BT;
    case TPosition::C2PIPE2GM: return P_FB;
    default: return P_UB;
  }
}
inline const char* pos_name(AscendC::TPosition p) {
  static const char* n[] = {"GM", "A1", "A2", "B1", "B2", "C1", "C2", "CO1", "CO2", "VECIN", "VECOUT", "VECCALC",
                            "LCM", "SPM", "SHM", "TSCM", "C2PIPE2GM", "MAX"};
  return n[(int)p];
}

struct ChipProfile {
  const char* name;
  int arch;
  uint32_t cap[P_NUM];  // usable bytes per physical buffer (GM unused)
  int aic_cores;
  int aiv_per_aic;
};
// Capacities from ascendc.md section 1.3 (per AI core).  910B UB: 192 KB - 256 B - 8 KB AscendC reserve.
inline const ChipProfile& chip() {
  static const ChipProfile p910b{"Ascend910B (arch 2201)", 2201,
                                 {0, 512u * 1024, 64u * 1024, 64u * 1024, 128u * 1024, 192u * 1024 - 256 - 8 * 1024, 1024, 7 * 1024, 0, 0},
                                 24, 2};
  static const ChipProfile p950{"Ascend950 (arch 3510)", 3510,
                                {0, 512u * 1024, 64u * 1024, 64u * 1024, 256u * 1024, 248u * 1024, 4 * 1024, 16 * 1024, 4 * 1024, 4 * 1024},
                                32, 2};
  return EMU_ARCH == 2201 ? p910b : p950;
}

struct Shadow {
  uint32_t wseq = 0;
  uint8_t wpipe = 0xFF;
  uint32_t rseq[PI_NUM] = {0, 0, 0, 0, 0, 0, 0};
};
struct FlagState {
  bool set = false;
  uint32_t clk[PI_NUM] = {0, 0, 0, 0, 0, 0, 0};
};
constexpr int kMaxHardEvent = 64;

struct CoreCtx {
  bool is_aic = true;
  int block_idx = 0, sub_idx = 0, num_blocks = 1, sub_num = 1;
  int aic_id = 0;  // AIC this core belongs to
  std::string name;
  std::vector<uint8_t> mem[P_NUM];
  std::vector<Shadow> sh[P_NUM];
  uint32_t vc[PI_NUM][PI_NUM] = {};
  std::vector<std::string> opnames[PI_NUM];
  FlagState flags[kMaxHardEvent][8];
  int cur_pipe = -1;
  std::string cur_op;
  void init_mem(bool aic) {
    const ChipProfile& c = chip();
    for (int p = 1; p < P_NUM; ++p) {
      bool have = aic ? (p != P_UB) : (p == P_UB);
      if (!have || c.cap[p] == 0) continue;  // 2201 has no MX scale slots
      mem[p].assign(c.cap[p] + 256 * (p == P_UB) * 0, 0xFF);  // POISON 0xFF (NaN for f32/bf16/half/fp8)
      sh[p].assign((c.cap[p] + 31) / 32, Shadow{});
    }
    for (int p = 0; p < PI_NUM; ++p) opnames[p].push_back("<start>");
  }
  uint8_t* base(Phys p, const char* what) {
    if (p == P_GM) fail("%s: internal: GM has no arena", what);
    if (mem[p].empty())
      fail("core %s: %s uses %s, which does not exist on %s cores", name.c_str(), what, phys_name(p), is_aic ? "AIC (cube)" : "AIV (vector)");
    return mem[p].data();
  }
};
inline thread_local CoreCtx* g_cur = nullptr;
inline CoreCtx& cur() {
  if (!g_cur) fail("AscendC API called outside emu::Launch (no current core)");
  return *g_cur;
}

// ---- pipe / race model ----------------------------------------------------------------
// Each pipe is an in-order asynchronous queue.  Every op gets a sequence number on its pipe; a vector
// clock vc[p][q] = last op of pipe q known complete before pipe p's next op.  SetFlag snapshots vc[src],
// WaitFlag joins it into vc[dst]; PipeBarrier<PIPE_ALL> joins all; TQue EnQue/DeQue and FreeTensor/AllocTensor
// carry the implicit producer->consumer and consumer->producer events.  A 32-byte-granule shadow of each
// local buffer records the last writer and last reader per pipe; unordered cross-pipe RAW/WAR/WAW -> error.
inline void begin_op(int pipe, const std::string& name) {
  CoreCtx& c = cur();
  c.cur_pipe = pipe;
  c.cur_op = name;
  c.vc[pipe][pipe] += 1;
  c.opnames[pipe].push_back(name);
}
inline std::string event_name(int src, int dst) { return std::string(pipe_name(src)) + "_" + pipe_name(dst); }
inline void race(CoreCtx& c, const char* kind, Phys b, uint64_t off, uint64_t len, uint64_t gaddr, int other_pipe, uint32_t other_seq,
                 const char* other_access) {
  const std::string& oname = other_seq < c.opnames[other_pipe].size() ? c.opnames[other_pipe][other_seq] : std::string("?");
  fail("race (%s): core %s: %s [pipe %s] %s %s[0x%llx,0x%llx) (conflict at 0x%llx) %s by %s [pipe %s, op #%u] with no ordering sync "
       "between them (missing SetFlag/WaitFlag<HardEvent::%s>, TQue EnQue/DeQue, or PipeBarrier<PIPE_ALL>)",
       kind, c.name.c_str(), c.cur_op.c_str(), pipe_name(c.cur_pipe), (kind[0] == 'R') ? "reads" : "writes", phys_name(b),
       (unsigned long long)off, (unsigned long long)(off + len), (unsigned long long)gaddr, other_access, oname.c_str(),
       pipe_name(other_pipe), other_seq, event_name(other_pipe, c.cur_pipe).c_str());
}
inline void check_bounds(CoreCtx& c, Phys b, uint64_t off, uint64_t len, const char* what) {
  uint64_t cap = c.mem[b].size();
  if (off + len > cap)
    fail("core %s: %s: out of bounds access %s[0x%llx,0x%llx) exceeds capacity %llu bytes on %s", c.name.c_str(), what, phys_name(b),
         (unsigned long long)off, (unsigned long long)(off + len), (unsigned long long)cap, chip().name);
}
inline void acc_read(Phys b, uint64_t off, uint64_t len) {
  if (b == P_GM || len == 0) return;
  CoreCtx& c = cur();
  check_bounds(c, b, off, len, c.cur_op.c_str());
  int p = c.cur_pipe;
  uint32_t seq = c.vc[p][p];
  auto& sh = c.sh[b];
  for (uint64_t g = off / 32; g <= (off + len - 1) / 32; ++g) {
    Shadow& s = sh[g];
    if (s.wpipe != 0xFF && s.wpipe != p && c.vc[p][s.wpipe] < s.wseq) race(c, "RAW", b, off, len, g * 32, s.wpipe, s.wseq, "written");
    s.rseq[p] = seq;
  }
}
inline void acc_write(Phys b, uint64_t off, uint64_t len) {
  if (b == P_GM || len == 0) return;
  CoreCtx& c = cur();
  check_bounds(c, b, off, len, c.cur_op.c_str());
  int p = c.cur_pipe;
  uint32_t seq = c.vc[p][p];
  auto& sh = c.sh[b];
  for (uint64_t g = off / 32; g <= (off + len - 1) / 32; ++g) {
    Shadow& s = sh[g];
    if (s.wpipe != 0xFF && s.wpipe != p && c.vc[p][s.wpipe] < s.wseq) race(c, "WAW", b, off, len, g * 32, s.wpipe, s.wseq, "written");
    for (int q = 0; q < PI_NUM; ++q)
      if (q != p && s.rseq[q] > c.vc[p][q]) race(c, "WAR", b, off, len, g * 32, q, s.rseq[q], "still being read");
    s.wpipe = (uint8_t)p;
    s.wseq = seq;
  }
}
inline void join(uint32_t* dst, const uint32_t* src) {
  for (int i = 0; i < PI_NUM; ++i) dst[i] = dst[i] > src[i] ? dst[i] : src[i];
}
inline void check_align(uint64_t addr, uint64_t a, const char* what, const char* buf) {
  if (addr % a) fail("alignment: %s: %s address 0x%llx is not %llu-byte aligned (core %s)", what, buf, (unsigned long long)addr,
                     (unsigned long long)a, cur().name.c_str());
}

// ---- dtype helpers ----
template <class T> inline double to_d(const T& v) {
  if constexpr (std::is_arithmetic<T>::value) return (double)v;
  else return (double)(float)v;
}
template <class T> inline T from_d(double v) {
  if constexpr (std::is_arithmetic<T>::value) return static_cast<T>(v);
  else return T((float)v);
}
template <class T> constexpr const char* tname() {
  if constexpr (std::is_same<T, float>::value) return "float";
  else if constexpr (std::is_same<T, half>::value) return "half";
  else if constexpr (std::is_same<T, bfloat16_t>::value) return "bfloat16_t";
  else if constexpr (std::is_same<T, fp8_e4m3fn_t>::value) return "fp8_e4m3fn_t";
  else if constexpr (std::is_same<T, fp8_e5m2_t>::value) return "fp8_e5m2_t";
  else if constexpr (std::is_same<T, fp8_e8m0_t>::value) return "fp8_e8m0_t";
  else if constexpr (std::is_same<T, int8_t>::value) return "int8_t";
  else if constexpr (std::is_same<T, int32_t>::value) return "int32_t";
  else if constexpr (std::is_same<T, hifloat8_t>::value) return "hifloat8_t";
  else if constexpr (std::is_same<T, fp4x2_e2m1_t>::value) return "fp4x2_e2m1_t";
  else if constexpr (std::is_same<T, uint16_t>::value) return "uint16_t";
  else return "T";
}
template <class T> constexpr bool is_fp8() { return std::is_same<T, fp8_e4m3fn_t>::value || std::is_same<T, fp8_e5m2_t>::value; }

// ---- cross-core state / watchdog -------------------------------------------------------
struct Waiter {
  bool active = false;
  std::function<bool()> ready;
  std::string what;
};
struct Global {
  std::mutex mu;
  std::condition_variable cv;
  int alive = 0;
  std::vector<CoreCtx*> cores;  // index: AICs first, then AIVs
  std::vector<Waiter> waiters;  // same index
  std::vector<std::array<int, 16>> xflag;  // received cross-core flag counts per core
  std::vector<std::array<int, 16>> half2;  // mode-2 AIV->AIC: per-AIV pending sets (index of AIV)
  std::array<int, 16> mode0_sets_aic{}, mode0_sets_aiv{};
  std::vector<std::array<int, 16>> mode0_waits;
  int syncall_arrived[2] = {0, 0}, syncall_gen[2] = {0, 0};
  int n_aic = 0, n_aiv = 0, ratio = 1;
};
inline Global& G() { static Global g; return g; }
inline int core_index(const CoreCtx& c) {
  Global& g = G();
  for (size_t i = 0; i < g.cores.size(); ++i)
    if (g.cores[i] == &c) return (int)i;
  return -1;
}
inline double watchdog_seconds() {
  const char* e = std::getenv("ASCENDC_EMU_WATCHDOG_S");
  return e ? std::atof(e) : 20.0;
}
// must hold G().mu
inline void check_deadlock_locked() {
  Global& g = G();
  if (g.alive <= 0) return;
  int blocked = 0;
  for (size_t i = 0; i < g.cores.size(); ++i)
    if (g.waiters[i].active && !g.waiters[i].ready()) ++blocked;
  if (blocked < g.alive) return;
  std::string msg;
  for (size_t i = 0; i < g.cores.size(); ++i)
    if (g.waiters[i].active) msg += (msg.empty() ? "" : "; ") + g.cores[i]->name + " blocked in " + g.waiters[i].what;
  fail("deadlock (watchdog): all %d live cores are blocked and no flag they wait on can be set: %s", g.alive, msg.c_str());
}
// block the current core until ready() (called with lock held via unique_lock)
inline void block_until(std::unique_lock<std::mutex>& lk, std::function<bool()> ready, const std::string& what) {
  Global& g = G();
  int me = core_index(cur());
  if (ready()) return;
  g.waiters[me].active = true;
  g.waiters[me].ready = ready;
  g.waiters[me].what = what;
  check_deadlock_locked();
  auto t0 = std::chrono::steady_clock::now();
  while (!ready()) {
    g.cv.wait_for(lk, std::chrono::milliseconds(50));
    check_deadlock_locked();
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el > watchdog_seconds())
      fail("deadlock (watchdog timeout %.0fs): core %s blocked in %s", watchdog_seconds(), cur().name.c_str(), what.c_str());
  }
  g.waiters[me].active = false;
}
}  // namespace emu

// =====================================================================================
// AscendC API
// =====================================================================================
namespace AscendC {
using TEventID = int8_t;
enum class HardEvent : uint8_t {
  MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M,
  M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S,
  M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, S_M, M_M, MTE1_S, S_MTE1, MTE3_FIX, FIX_V, V_FIX, MAX
};
}  // namespace AscendC

namespace emu {
inline void event_pipes(AscendC::HardEvent e, int& s, int& d) {
  using H = AscendC::HardEvent;
  switch (e) {
#define EMU_EV(A, B) case H::A##_##B: s = PI_##A; d = PI_##B; return;
    EMU_EV(MTE2, MTE1) EMU_EV(MTE1, MTE2) EMU_EV(MTE1, M) EMU_EV(M, MTE1) EMU_EV(MTE2, V) EMU_EV(V, MTE2) EMU_EV(MTE3, V)
    EMU_EV(V, MTE3) EMU_EV(M, V) EMU_EV(V, M) EMU_EV(V, V) EMU_EV(MTE3, MTE1) EMU_EV(MTE1, MTE3) EMU_EV(MTE1, V) EMU_EV(MTE2, M)
    EMU_EV(M, MTE2) EMU_EV(V, MTE1) EMU_EV(M, FIX) EMU_EV(FIX, M) EMU_EV(MTE3, MTE2) EMU_EV(MTE2, MTE3) EMU_EV(S, V) EMU_EV(V, S)
    EMU_EV(S, MTE2) EMU_EV(MTE2, S) EMU_EV(S, MTE3) EMU_EV(MTE3, S) EMU_EV(MTE2, FIX) EMU_EV(FIX, MTE2) EMU_EV(FIX, S) EMU_EV(M, S)
    EMU_EV(FIX, MTE3) EMU_EV(MTE1, FIX) EMU_EV(FIX, MTE1) EMU_EV(FIX, FIX) EMU_EV(S, M) EMU_EV(M, M) EMU_EV(MTE1, S) EMU_EV(S, MTE1)
    EMU_EV(MTE3, FIX) EMU_EV(FIX, V) EMU_EV(V, FIX)
#undef EMU_EV
    default: fail("unknown HardEvent %d", (int)e);
  }
}
// producer / consumer pipes implied by a TQue position (EnQue/DeQue events)
inline int prod_pipe(AscendC::TPosition p) {
  using AscendC::TPosition;
  switch (p) {
    case TPosition::VECIN: case TPosition::A1: case TPosition::B1: case TPosition::C1: return PI_MTE2;
    case TPosition::VECOUT: case TPosition::VECCALC: return PI_V;
    case TPosition::A2: case TPosition::B2: return PI_MTE1;
    case TPosition::CO1: return PI_M;
    case TPosition::CO2: return PI_FIX;
    default: fail("TQue: position %s is not a valid queue position", pos_name(p));
  }
}
inline int cons_pipe(AscendC::TPosition p) {
  using AscendC::TPosition;
  switch (p) {
    case TPosition::VECIN: case TPosition::VECCALC: return PI_V;
    case TPosition::VECOUT: return PI_MTE3;
    case TPosition::A1: case TPosition::B1: case TPosition::C1: return PI_MTE1;
    case TPosition::A2: case TPosition::B2: return PI_M;
    case TPosition::CO1: return PI_FIX;
    case TPosition::CO2: return PI_MTE3;
    default: fail("TQue: position %s is not a valid queue position", pos_name(p));
  }
}
}  // namespace emu

namespace AscendC {
// ---------------------------------------------------------------- tensors
template <typename T> class GlobalTensor {
 public:
  T* buf_ = nullptr;
  uint64_t size_ = 0;  // 0 = unknown
  __aicore__ inline GlobalTensor() = default;
  __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) { buf_ = buffer; size_ = bufferSize; }
  __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer) { buf_ = buffer; size_ = 0; }
  __aicore__ inline GlobalTensor operator[](const uint64_t offset) const {
    GlobalTensor r;
    r.buf_ = buf_ + offset;
    r.size_ = size_ ? (offset <= size_ ? size_ - offset : 0) : 0;
    if (size_ && offset > size_) emu::fail("GlobalTensor::operator[]: offset %llu beyond buffer size %llu", (unsigned long long)offset, (unsigned long long)size_);
    return r;
  }
  __aicore__ inline const __gm__ T* GetPhyAddr() const { return buf_; }
  __aicore__ inline __gm__ T* GetPhyAddr(const uint64_t offset) const { return buf_ + offset; }
  __aicore__ inline uint64_t GetSize() const { return size_; }
  __aicore__ inline T GetValue(const uint64_t offset) const { chk(offset, 1, "GlobalTensor::GetValue"); return buf_[offset]; }
  __aicore__ inline void SetValue(const uint64_t offset, T value) const { chk(offset, 1, "GlobalTensor::SetValue"); buf_[offset] = value; }
  void chk(uint64_t off, uint64_t n, const char* what) const {
    if (!buf_) emu::fail("%s: GlobalTensor has no buffer (SetGlobalBuffer not called)", what);
    if (size_ && off + n > size_)
      emu::fail("%s: GM access [%llu,%llu) out of bounds of GlobalTensor size %llu", what, (unsigned long long)off,
                (unsigned long long)(off + n), (unsigned long long)size_);
  }
};

template <typename T> class LocalTensor {
 public:
  TPosition pos_ = TPosition::VECCALC;
  uint32_t addr_ = 0;  // byte offset within the physical buffer
  uint32_t size_ = 0;  // elements
  bool valid_ = false;
  __aicore__ inline LocalTensor() = default;
  __aicore__ inline LocalTensor(TPosition pos, uint32_t addr, uint32_t tileSize) : pos_(pos), addr_(addr), size_(tileSize), valid_(true) {
    emu::CoreCtx& c = emu::cur();
    emu::Phys ph = emu::pos_phys(pos);
    c.base(ph, "LocalTensor ctor");
    emu::check_bounds(c, ph, addr, (uint64_t)tileSize * sizeof(T), "LocalTensor(TPosition, addr, tileSize)");
  }
  __aicore__ inline LocalTensor operator[](const uint32_t offset) const {
    if (offset > size_) emu::fail("LocalTensor::operator[]: offset %u beyond tensor size %u (%s)", offset, size_, emu::pos_name(pos_));
    LocalTensor r = *this;
    r.addr_ = addr_ + offset * (uint32_t)sizeof(T);
    r.size_ = size_ - offset;
    return r;
  }
  __aicore__ inline uint32_t GetSize() const { return size_; }
  __aicore__ inline uint32_t GetLength() const { return size_ * (uint32_t)sizeof(T); }
  __aicore__ inline void SetSize(const uint32_t size) { size_ = size; }
  __aicore__ inline uint64_t GetPhyAddr() const { return addr_; }
  __aicore__ inline TPosition GetPosition() const { return pos_; }
  template <typename U> __aicore__ inline LocalTensor<U> ReinterpretCast() const {
    LocalTensor<U> r;
    r.pos_ = pos_; r.addr_ = addr_; r.valid_ = valid_;
    r.size_ = (uint32_t)((uint64_t)size_ * sizeof(T) / sizeof(U));
    return r;
  }
  __aicore__ inline T GetValue(const uint32_t index) const {
    need(index + 1, "LocalTensor::GetValue");
    emu::begin_op(emu::PI_S, "GetValue");
    emu::acc_read(phys(), addr_ + (uint64_t)index * sizeof(T), sizeof(T));
    return ptr()[index];
  }
  __aicore__ inline void SetValue(const uint32_t index, const T& value) const {
    need(index + 1, "LocalTensor::SetValue");
    emu::begin_op(emu::PI_S, "SetValue");
    emu::acc_write(phys(), addr_ + (uint64_t)index * sizeof(T), sizeof(T));
    ptr()[index] = value;
  }
  // --- emulator helpers ---
  emu::Phys phys() const { return emu::pos_phys(pos_); }
  T* ptr() const { return reinterpret_cast<T*>(emu::cur().base(phys(), "LocalTensor") + addr_); }
  void need(uint64_t n, const char* what) const {
    if (!valid_) emu::fail("%s: LocalTensor is not initialised (no AllocTensor/Get/ctor)", what);
    if (n > size_) emu::fail("%s: accesses %llu elements but LocalTensor(%s @0x%x) holds %u", what, (unsigned long long)n, emu::pos_name(pos_), addr_, size_);
    emu::check_bounds(emu::cur(), phys(), addr_, n * sizeof(T), what);
  }
};

// ---------------------------------------------------------------- TPipe / TQue / TBuf
class TPipe;
namespace emu_detail {
struct Slot {
  uint32_t addr = 0;
  int state = 0;  // 0 free, 1 allocated, 2 enqueued, 3 dequeued
  uint32_t clk_free[emu::PI_NUM] = {};
  uint32_t clk_enq[emu::PI_NUM] = {};
};
}  // namespace emu_detail

template <TPosition src, TPosition dst, int32_t depth, auto mask = 0> class TQueBind {
 public:
  std::vector<emu_detail::Slot> slots_;
  std::vector<int> fifo_;
  uint32_t len_ = 0;
  int next_ = 0;
  __aicore__ inline TQueBind() = default;
  void emu_init(uint32_t base, uint8_t num, uint32_t len) {
    slots_.assign(num, emu_detail::Slot{});
    for (int i = 0; i < num; ++i) slots_[i].addr = base + i * len;
    len_ = len;
  }
  template <typename T> __aicore__ inline LocalTensor<T> AllocTensor() {
    if (slots_.empty()) emu::fail("TQue<%s>::AllocTensor: queue has no buffers (TPipe::InitBuffer not called)", emu::pos_name(src));
    int n = (int)slots_.size();
    for (int k = 0; k < n; ++k) {
      int i = (next_ + k) % n;
      if (slots_[i].state == 0) {
        next_ = (i + 1) % n;
        slots_[i].state = 1;
        // implicit event consumer->producer (buffer reuse): producer waits for the consumer that freed it
        emu::join(emu::cur().vc[emu::prod_pipe(src)], slots_[i].clk_free);
        LocalTensor<T> t;
        t.pos_ = src; t.addr_ = slots_[i].addr; t.size_ = len_ / sizeof(T); t.valid_ = true;
        return t;
      }
    }
    emu::fail("TQue<%s>::AllocTensor: all %d buffers are in use (missing FreeTensor?) on core %s", emu::pos_name(src), n, emu::cur().name.c_str());
  }
  int find(uint32_t addr, const char* what) {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].addr == addr) return (int)i;
    emu::fail("TQue<%s>::%s: tensor @0x%x does not belong to this queue", emu::pos_name(src), what, addr);
  }
  template <typename T> __aicore__ inline bool EnQue(const LocalTensor<T>& tensor) {
    int i = find(tensor.addr_, "EnQue");
    if (slots_[i].state != 1) emu::fail("TQue<%s>::EnQue: tensor @0x%x was not allocated by AllocTensor (state %d)", emu::pos_name(src), tensor.addr_, slots_[i].state);
    if ((int)fifo_.size() >= depth) emu::fail("TQue<%s>::EnQue: more than depth=%d EnQue calls without DeQue", emu::pos_name(src), depth);
    std::memcpy(slots_[i].clk_enq, emu::cur().vc[emu::prod_pipe(src)], sizeof(slots_[i].clk_enq));
    slots_[i].state = 2;
    fifo_.push_back(i);
    return true;
  }
  template <typename T> __aicore__ inline LocalTensor<T> DeQue() {
    if (fifo_.empty())
      emu::fail("deadlock: core %s: TQue<%s>::DeQue on an empty queue can never complete (no matching EnQue)", emu::cur().name.c_str(), emu::pos_name(src));
    int i = fifo_.front();
    fifo_.erase(fifo_.begin());
    emu::join(emu::cur().vc[emu::cons_pipe(dst)], slots_[i].clk_enq);
    slots_[i].state = 3;
    LocalTensor<T> t;
    t.pos_ = dst; t.addr_ = slots_[i].addr; t.size_ = len_ / sizeof(T); t.valid_ = true;
    return t;
  }
  template <typename T> __aicore__ inline void FreeTensor(LocalTensor<T>& tensor) {
    int i = find(tensor.addr_, "FreeTensor");
    if (slots_[i].state != 3 && slots_[i].state != 1)
      emu::fail("TQue<%s>::FreeTensor: tensor @0x%x is not held (double free?)", emu::pos_name(src), tensor.addr_);
    int cp = slots_[i].state == 3 ? emu::cons_pipe(dst) : emu::prod_pipe(src);
    std::memcpy(slots_[i].clk_free, emu::cur().vc[cp], sizeof(slots_[i].clk_free));
    slots_[i].state = 0;
    emu::Phys ph = emu::pos_phys(src);
    std::memset(emu::cur().base(ph, "FreeTensor") + slots_[i].addr, 0xFF, len_);  // re-poison
  }
  __aicore__ inline bool VacantInQue() { return (int)fifo_.size() < depth; }
  __aicore__ inline bool HasTensorInQue() { return !fifo_.empty(); }
  __aicore__ inline int32_t GetTensorCountInQue() { return (int32_t)fifo_.size(); }
  __aicore__ inline void FreeAllEvent() {}
};
template <TPosition pos, int32_t depth, auto mask = 0> class TQue : public TQueBind<pos, pos, depth, mask> {};

template <TPosition pos = TPosition::LCM> class TBuf {
 public:
  uint32_t addr_ = 0, len_ = 0;
  bool init_ = false;
  template <typename T> __aicore__ inline LocalTensor<T> Get() { return Get<T>(len_ / sizeof(T)); }
  template <typename T> __aicore__ inline LocalTensor<T> Get(uint32_t len) {
    if (!init_) emu::fail("TBuf<%s>::Get: TPipe::InitBuffer not called", emu::pos_name(pos));
    if ((uint64_t)len * sizeof(T) > len_) emu::fail("TBuf<%s>::Get(%u): exceeds buffer of %u bytes", emu::pos_name(pos), len, len_);
    LocalTensor<T> t;
    t.pos_ = pos; t.addr_ = addr_; t.size_ = len; t.valid_ = true;
    return t;
  }
  template <typename T> __aicore__ inline LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset) {
    if (!init_) emu::fail("TBuf<%s>::GetWithOffset: TPipe::InitBuffer not called", emu::pos_name(pos));
    if (bufOffset % 32) emu::fail("alignment: TBuf::GetWithOffset offset %u not 32-byte aligned", bufOffset);
    if (bufOffset + (uint64_t)size * sizeof(T) > len_) emu::fail("TBuf<%s>::GetWithOffset: [%u,+%zu) exceeds buffer of %u bytes", emu::pos_name(pos), bufOffset, size * sizeof(T), len_);
    LocalTensor<T> t;
    t.pos_ = pos; t.addr_ = addr_ + bufOffset; t.size_ = size; t.valid_ = true;
    return t;
  }
};

class TPipe {
 public:
  uint32_t off_[emu::P_NUM] = {};
  int evt_next_[(int)HardEvent::MAX] = {};
  __aicore__ inline TPipe() { emu::cur(); }
  __aicore__ inline void Init() { std::memset(off_, 0, sizeof off_); }
  uint32_t emu_alloc(TPosition pos, uint32_t bytes, const char* what) {
    emu::Phys ph = emu::pos_phys(pos);
    if (ph == emu::P_GM) emu::fail("%s: position %s is not a local buffer", what, emu::pos_name(pos));
    emu::cur().base(ph, what);
    uint32_t a = (off_[ph] + 31u) & ~31u;
    uint64_t cap = emu::chip().cap[ph];
    if ((uint64_t)a + bytes > cap)
      emu::fail("capacity: %s: %s (%s) needs %u bytes at offset %u but only %llu bytes are usable on %s", what, emu::phys_name(ph),
                emu::pos_name(pos), bytes, a, (unsigned long long)cap, emu::chip().name);
    off_[ph] = a + bytes;
    return a;
  }
  template <class T> __aicore__ inline bool InitBuffer(T& que, uint8_t num, uint32_t len) {
    uint32_t l = (len + 31u) & ~31u;
    uint32_t base = emu_alloc(que_pos(que), l * num, "TPipe::InitBuffer(TQue)");
    que.emu_init(base, num, l);
    return true;
  }
  template <TPosition pos> __aicore__ inline bool InitBuffer(TBuf<pos>& buf, uint32_t len) {
    uint32_t l = (len + 31u) & ~31u;
    buf.addr_ = emu_alloc(pos, l, "TPipe::InitBuffer(TBuf)");
    buf.len_ = l;
    buf.init_ = true;
    return true;
  }
  template <HardEvent evt> __aicore__ inline TEventID AllocEventID() {
    int& n = evt_next_[(int)evt];
    if (n >= 8) emu::fail("TPipe::AllocEventID: more than 8 event IDs for one HardEvent");
    return (TEventID)n++;
  }
  template <HardEvent evt> __aicore__ inline void ReleaseEventID(TEventID) { if (evt_next_[(int)evt] > 0) --evt_next_[(int)evt]; }
  template <HardEvent evt> __aicore__ inline TEventID FetchEventID() { return (TEventID)evt_next_[(int)evt]; }
  __aicore__ inline void Destroy() {}
  __aicore__ inline void Reset() { Init(); }
 private:
  template <TPosition s, TPosition d, int32_t dp, auto m> static TPosition que_pos(TQueBind<s, d, dp, m>&) { return s; }
};

// ---------------------------------------------------------------- param structs
#if EMU_ARCH == 2201
struct Nd2NzParams {
  uint16_t ndNum = 1, nValue = 0, dValue = 0, srcNdMatrixStride = 0, srcDValue = 0, dstNzC0Stride = 0, dstNzNStride = 0, dstNzMatrixStride = 0;
  __aicore__ Nd2NzParams() = default;
  __aicore__ Nd2NzParams(uint16_t ndNum_, uint16_t nValue_, uint16_t dValue_, uint16_t srcNdMatrixStride_, uint16_t srcDValue_,
                         uint16_t dstNzC0Stride_, uint16_t dstNzNStride_, uint16_t dstNzMatrixStride_)
      : ndNum(ndNum_), nValue(nValue_), dValue(dValue_), srcNdMatrixStride(srcNdMatrixStride_), srcDValue(srcDValue_),
        dstNzC0Stride(dstNzC0Stride_), dstNzNStride(dstNzNStride_), dstNzMatrixStride(dstNzMatrixStride_) {}
};
#else
struct Nd2NzParams {
  uint16_t ndNum = 1, nValue = 0;
  uint32_t dValue = 0;
  uint64_t srcNdMatrixStride = 0, srcDValue = 0;
  uint16_t dstNzC0Stride = 0, dstNzNStride = 0;
  uint32_t dstNzMatrixStride = 0;
  __aicore__ Nd2NzParams() = default;
  __aicore__ Nd2NzParams(uint16_t ndNum_, uint16_t nValue_, uint32_t dValue_, uint64_t srcNdMatrixStride_, uint64_t srcDValue_,
                         uint16_t dstNzC0Stride_, uint16_t dstNzNStride_, uint32_t dstNzMatrixStride_)
      : ndNum(ndNum_), nValue(nValue_), dValue(dValue_), srcNdMatrixStride(srcNdMatrixStride_), srcDValue(srcDValue_),
        dstNzC0Stride(dstNzC0Stride_), dstNzNStride(dstNzNStride_), dstNzMatrixStride(dstNzMatrixStride_) {}
};
#endif
#if EMU_ARCH == 3510
// GM -> L1 from a DN (column-major) source: element (n, d) of the nValue x dValue matrix is read from
// src[d * srcDValue + n] (srcDValue: the source's pitch between consecutive d, in elements) and lands in Nz
// exactly as for Nd2Nz: (d / C0) * dstNzC0Stride * C0 + n * dstNzNStride * C0 + d % C0 (strides in 32 B).
// Only the d tail up to C0 is zero-filled (emulator reading of the 3510 DataCopy DN2NZ doc; not validated).
struct Dn2NzParams {
  uint16_t dnNum = 0, nValue = 0;
  uint32_t dValue = 0;
  uint64_t srcDnMatrixStride = 0, srcDValue = 0;
  uint16_t dstNzC0Stride = 0, dstNzNStride = 0;
  uint32_t dstNzMatrixStride = 0;
  __aicore__ Dn2NzParams() = default;
  __aicore__ Dn2NzParams(uint16_t dnNum_, uint16_t nValue_, uint32_t dValue_, uint64_t srcDnMatrixStride_, uint64_t srcDValue_,
                         uint16_t dstNzC0Stride_, uint16_t dstNzNStride_, uint32_t dstNzMatrixStride_)
      : dnNum(dnNum_), nValue(nValue_), dValue(dValue_), srcDnMatrixStride(srcDnMatrixStride_), srcDValue(srcDValue_),
        dstNzC0Stride(dstNzC0Stride_), dstNzNStride(dstNzNStride_), dstNzMatrixStride(dstNzMatrixStride_) {}
};
#endif
// InitConstValue (A1/B1: blocks of 32 B; A2/B2 on 2201 only: blocks of 512 B).  repeatTimes iterations of
// blockNum blocks, dstGap blocks between iterations.
template <typename T> struct InitConstValueParams {
  uint16_t repeatTimes = 0, blockNum = 0, dstGap = 0;
  T initValue = 0;
  __aicore__ InitConstValueParams() = default;
  __aicore__ InitConstValueParams(const uint16_t repeatTimes_, const uint16_t blockNum_, const uint16_t dstGap_, const T initValue_)
      : repeatTimes(repeatTimes_), blockNum(blockNum_), dstGap(dstGap_), initValue(initValue_) {}
  __aicore__ InitConstValueParams(const uint16_t repeatTimes_, const T initValue_) : repeatTimes(repeatTimes_), blockNum(16), initValue(initValue_) {}
};
struct DataCopyParams {
  uint16_t blockCount = 1, blockLen = 0, srcStride = 0, dstStride = 0;  // blockLen/strides in 32 B units
  __aicore__ DataCopyParams() = default;
  __aicore__ DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStride_, uint16_t dstStride_)
      : blockCount(count), blockLen(len), srcStride(srcStride_), dstStride(dstStride_) {}
};
struct LoadData2DParams {
  uint16_t startIndex = 0, dstGap = 0, srcStride = 0;
  bool ifTranspose = false;
  uint8_t repeatTimes = 0, sid = 0, addrMode = 0;
  __aicore__ LoadData2DParams() = default;
  __aicore__ LoadData2DParams(uint16_t startIndex_, uint8_t repeatTimes_, uint16_t srcStride_, uint8_t sid_, uint16_t dstGap_,
                              bool ifTranspose_, uint8_t addrMode_)
      : startIndex(startIndex_), dstGap(dstGap_), srcStride(srcStride_), ifTranspose(ifTranspose_), repeatTimes(repeatTimes_), sid(sid_),
        addrMode(addrMode_) {}
};
struct LoadData2DParamsV2 {
  uint32_t mStartPosition = 0, kStartPosition = 0;
  uint16_t mStep = 0, kStep = 0;
  int32_t srcStride = 0;
  uint16_t dstStride = 0;
  bool ifTranspose = false;
  uint8_t sid = 0;
  __aicore__ LoadData2DParamsV2() = default;
  __aicore__ LoadData2DParamsV2(uint32_t mStart, uint32_t kStart, uint16_t mStep_, uint16_t kStep_, int32_t srcStride_, uint16_t dstStride_,
                                bool ifTranspose_, uint8_t sid_)
      : mStartPosition(mStart), kStartPosition(kStart), mStep(mStep_), kStep(kStep_), srcStride(srcStride_), dstStride(dstStride_),
        ifTranspose(ifTranspose_), sid(sid_) {}
};
struct LoadData2DMxParams {
  uint16_t xStartPosition = 0, yStartPosition = 0;
  uint8_t xStep = 0, yStep = 0;
  uint16_t srcStride = 0, dstStride = 0;
  __aicore__ LoadData2DMxParams() = default;
  __aicore__ LoadData2DMxParams(uint16_t x, uint16_t y, uint8_t xs, uint8_t ys, uint16_t ss, uint16_t ds)
      : xStartPosition(x), yStartPosition(y), xStep(xs), yStep(ys), srcStride(ss), dstStride(ds) {}
};
struct MmadParams {
  uint16_t m = 0, n = 0, k = 0;
  bool isBias = false;
  int32_t fmOffset = 0;
  bool enSsparse = false, enWinogradA = false, enWinogradB = false;
  uint8_t unitFlag = 0;
  bool kDirectionAlign = false, cmatrixSource = false, cmatrixInitVal = true, disableGemv = false;
  __aicore__ MmadParams() = default;
  __aicore__ MmadParams(uint16_t m_, uint16_t n_, uint16_t k_, uint8_t unitFlag_, bool cmatrixSource_, bool cmatrixInitVal_)
      : m(m_), n(n_), k(k_), unitFlag(unitFlag_), cmatrixSource(cmatrixSource_), cmatrixInitVal(cmatrixInitVal_) {}
  __aicore__ MmadParams(uint16_t m_, uint16_t n_, uint16_t k_, bool isBias_, int32_t fmOffset_, bool enSsparse_, bool enWinogradA_, bool enWinogradB_)
      : m(m_), n(n_), k(k_), isBias(isBias_), fmOffset(fmOffset_), enSsparse(enSsparse_), enWinogradA(enWinogradA_), enWinogradB(enWinogradB_) {}
};
enum class QuantMode_t : uint8_t {
  NoQuant, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE, REQ8, VREQ8,
  QF322FP8_PRE, VQF322FP8_PRE, QF322HIF8_PRE, VQF322HIF8_PRE, QF322HIF8_PRE_HYBRID, VQF322HIF8_PRE_HYBRID,
  QS322BF16_PRE, VQS322BF16_PRE, QF322F16_PRE, VQF322F16_PRE, QF322BF16_PRE, VQF322BF16_PRE, QF322F32_PRE, VQF322F32_PRE
};
struct FixpipeParamsV220 {
  uint16_t nSize = 0, mSize = 0, srcStride = 0;
  uint32_t dstStride = 0;
  QuantMode_t quantPre = QuantMode_t::NoQuant;
  uint64_t deqScalar = 0;
  uint16_t ndNum = 1, srcNdStride = 0, dstNdStride = 0;
  bool reluEn = false;
  uint8_t unitFlag = 0;
  bool isChannelSplit = false;
  __aicore__ FixpipeParamsV220() = default;
  __aicore__ FixpipeParamsV220(uint16_t nSize_, uint16_t mSize_, uint16_t srcStride_, uint32_t dstStride_, bool reluEn_)
      : nSize(nSize_), mSize(mSize_), srcStride(srcStride_), dstStride(dstStride_), reluEn(reluEn_) {}
  __aicore__ FixpipeParamsV220(uint16_t nSize_, uint16_t mSize_, uint16_t srcStride_, uint32_t dstStride_, bool reluEn_, QuantMode_t quantPre_,
                               int64_t deqScalar_, uint16_t ndNum_, uint16_t srcNdStride_, uint16_t dstNdStride_, uint8_t unitFlag_)
      : nSize(nSize_), mSize(mSize_), srcStride(srcStride_), dstStride(dstStride_), quantPre(quantPre_), deqScalar((uint64_t)deqScalar_),
        ndNum(ndNum_), srcNdStride(srcNdStride_), dstNdStride(dstNdStride_), reluEn(reluEn_), unitFlag(unitFlag_) {}
};
enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig { CO2Layout format; };
inline constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
inline constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
inline constexpr FixpipeConfig CFG_COLUMN_MAJOR = {CO2Layout::COLUMN_MAJOR};
template <CO2Layout format = CO2Layout::ROW_MAJOR> struct FixpipeParamsArch3510 : FixpipeParamsV220 {
  uint8_t dualDstCtl = 0;
  bool subBlockId = false;
  using FixpipeParamsV220::FixpipeParamsV220;
  __aicore__ FixpipeParamsArch3510() = default;
};
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, CAST_HYBRID, CAST_EVEN, CAST_ZERO };

// ---------------------------------------------------------------- sync
template <HardEvent evt> __aicore__ inline void SetFlag(int32_t eventID) {
  emu::CoreCtx& c = emu::cur();
  int s, d;
  emu::event_pipes(evt, s, d);
  if (eventID < 0 || eventID > 7) emu::fail("SetFlag<%s>: eventID %d out of range [0,7] on core %s", emu::event_name(s, d).c_str(), eventID, c.name.c_str());
#if EMU_ARCH == 3510
  if (eventID >= 6) emu::fail("SetFlag<%s>: eventID %d is reserved on arch 3510 (IDs 6 and 7)", emu::event_name(s, d).c_str(), eventID);
#endif
  emu::FlagState& f = c.flags[(int)evt][eventID];
  if (f.set) emu::fail("SetFlag<%s>(%d) set twice without an intervening WaitFlag on core %s", emu::event_name(s, d).c_str(), eventID, c.name.c_str());
  f.set = true;
  std::memcpy(f.clk, c.vc[s], sizeof f.clk);
}
template <HardEvent evt> __aicore__ inline void WaitFlag(int32_t eventID) {
  emu::CoreCtx& c = emu::cur();
  int s, d;
  emu::event_pipes(evt, s, d);
  if (eventID < 0 || eventID > 7) emu::fail("WaitFlag<%s>: eventID %d out of range [0,7] on core %s", emu::event_name(s, d).c_str(), eventID, c.name.c_str());
  emu::FlagState& f = c.flags[(int)evt][eventID];
  if (!f.set)
    emu::fail("deadlock: core %s: WaitFlag<HardEvent::%s>(eventID=%d) can never be satisfied: no SetFlag<HardEvent::%s>(%d) is pending on this core",
              c.name.c_str(), emu::event_name(s, d).c_str(), eventID, emu::event_name(s, d).c_str(), eventID);
  f.set = false;
  emu::join(c.vc[d], f.clk);
}
template <pipe_t pipe> __aicore__ inline void PipeBarrier() {
  emu::CoreCtx& c = emu::cur();
  if (pipe == PIPE_ALL) {
    uint32_t all[emu::PI_NUM] = {};
    for (int p = 0; p < emu::PI_NUM; ++p) emu::join(all, c.vc[p]);
    for (int p = 0; p < emu::PI_NUM; ++p) std::memcpy(c.vc[p], all, sizeof all);
  }
  // single-pipe barriers: pipes are modelled in-order, nothing to do
}
inline void pipe_barrier(pipe_t p) {
  if (p == PIPE_ALL) PipeBarrier<PIPE_ALL>();
}

// ---------------------------------------------------------------- system variables
__aicore__ inline int64_t GetBlockIdx() { return emu::cur().block_idx; }
__aicore__ inline int64_t GetBlockNum() { return emu::cur().num_blocks; }
__aicore__ inline int64_t GetSubBlockIdx() { return emu::cur().sub_idx; }
__aicore__ inline int64_t GetSubBlockNum() { return emu::cur().sub_num; }
__aicore__ inline int64_t GetTaskRatio() { return emu::cur().is_aic ? 1 : emu::cur().sub_num; }

// ---------------------------------------------------------------- data movement
namespace emu_detail {
template <class T> constexpr uint32_t c0() { return 32u / (uint32_t)sizeof(T); }
inline void need_aic(const char* what) {
  if (!emu::cur().is_aic) emu::fail("%s: cube-side API called on AIV core %s", what, emu::cur().name.c_str());
}
}  // namespace emu_detail

// GM -> L1 with ND -> NZ conversion (MTE2)
template <typename T> __aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p) {
  const char* what = "DataCopy(GM->L1,Nd2Nz)";
  if (dst.phys() != emu::P_L1) emu::fail("%s: dst position %s is not L1 (A1/B1)", what, emu::pos_name(dst.pos_));
  emu_detail::need_aic(what);
  emu::check_align(dst.addr_, 32, what, "L1 dst");
  const uint32_t C0 = emu_detail::c0<T>();
  emu::begin_op(emu::PI_MTE2, what);
  uint32_t dpad = (uint32_t)((p.dValue + C0 - 1) / C0 * C0);
  T* d = dst.ptr();
  uint64_t extent = 0;
  for (uint32_t nd = 0; nd < p.ndNum; ++nd)
    for (uint32_t r = 0; r < p.nValue; ++r)
      for (uint32_t cg = 0; cg < dpad / C0; ++cg) {
        uint64_t e = (uint64_t)nd * p.dstNzMatrixStride + (uint64_t)cg * p.dstNzC0Stride * C0 + (uint64_t)r * p.dstNzNStride * C0;
        extent = std::max<uint64_t>(extent, e + C0);
      }
  dst.need(extent, what);
  for (uint32_t nd = 0; nd < p.ndNum; ++nd)
    for (uint32_t r = 0; r < p.nValue; ++r) {
      const T* s = src.buf_ + (uint64_t)nd * p.srcNdMatrixStride + (uint64_t)r * p.srcDValue;
      src.chk((uint64_t)nd * p.srcNdMatrixStride + (uint64_t)r * p.srcDValue, p.dValue, what);
      for (uint32_t cg = 0; cg < dpad / C0; ++cg) {
        uint64_t e = (uint64_t)nd * p.dstNzMatrixStride + (uint64_t)cg * p.dstNzC0Stride * C0 + (uint64_t)r * p.dstNzNStride * C0;
        emu::acc_write(emu::P_L1, dst.addr_ + e * sizeof(T), C0 * sizeof(T));
        for (uint32_t c = 0; c < C0; ++c) {
          uint32_t col = cg * C0 + c;
          if (col < p.dValue) d[e + c] = s[col];
          else std::memset((void*)&d[e + c], 0, sizeof(T));  // only the 32 B column tail is zero-filled
        }
      }
    }
}
#if EMU_ARCH == 3510
// GM -> L1 with DN -> NZ conversion (MTE2, arch 3510 only)
template <typename T, bool enableSmallC0 = false>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Dn2NzParams& p) {
  const char* what = "DataCopy(GM->L1,Dn2Nz)";
  static_assert(!enableSmallC0, "emulator: enableSmallC0 is not emulated");
  if (dst.phys() != emu::P_L1) emu::fail("%s: dst position %s is not L1 (A1/B1)", what, emu::pos_name(dst.pos_));
  emu_detail::need_aic(what);
  emu::check_align(dst.addr_, 32, what, "L1 dst");
  const uint32_t C0 = emu_detail::c0<T>();
  emu::begin_op(emu::PI_MTE2, what);
  const uint32_t dpad = (uint32_t)((p.dValue + C0 - 1) / C0 * C0);
  uint64_t extent = 0;
  for (uint32_t nd = 0; nd < p.dnNum; ++nd)
    for (uint32_t n = 0; n < p.nValue; ++n)
      for (uint32_t cg = 0; cg < dpad / C0; ++cg)
        extent = std::max<uint64_t>(extent, (uint64_t)nd * p.dstNzMatrixStride + (uint64_t)cg * p.dstNzC0Stride * C0 +
                                                (uint64_t)n * p.dstNzNStride * C0 + C0);
  dst.need(extent, what);
  T* d = dst.ptr();
  for (uint32_t nd = 0; nd < p.dnNum; ++nd)
    for (uint32_t n = 0; n < p.nValue; ++n)
      for (uint32_t cg = 0; cg < dpad / C0; ++cg) {
        uint64_t e = (uint64_t)nd * p.dstNzMatrixStride + (uint64_t)cg * p.dstNzC0Stride * C0 + (uint64_t)n * p.dstNzNStride * C0;
        emu::acc_write(emu::P_L1, dst.addr_ + e * sizeof(T), C0 * sizeof(T));
        for (uint32_t c = 0; c < C0; ++c) {
          uint32_t col = cg * C0 + c;
          if (col < p.dValue) {
            uint64_t si = (uint64_t)nd * p.srcDnMatrixStride + (uint64_t)col * p.srcDValue + n;
            src.chk(si, 1, what);
            d[e + c] = src.buf_[si];
          } else {
            std::memset((void*)&d[e + c], 0, sizeof(T));  // only the d tail up to 32 B is zero-filled
          }
        }
      }
}
#endif
namespace emu_detail {
template <typename T> inline void copy_blocks(T* d, const T* s, const DataCopyParams& p) {
  uint64_t bl = (uint64_t)p.blockLen * 32;
  for (uint32_t b = 0; b < p.blockCount; ++b)
    std::memcpy((uint8_t*)d + b * (bl + (uint64_t)p.dstStride * 32), (const uint8_t*)s + b * (bl + (uint64_t)p.srcStride * 32), bl);
}
}  // namespace emu_detail
// GM -> UB / L1 (MTE2), contiguous
template <typename T> __aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count) {
  const char* what = dst.phys() == emu::P_UB ? "DataCopy(GM->UB)" : "DataCopy(GM->L1)";
  if (dst.phys() != emu::P_UB && dst.phys() != emu::P_L1) emu::fail("DataCopy(GM->local): dst position %s unsupported", emu::pos_name(dst.pos_));
  if ((uint64_t)count * sizeof(T) % 32) emu::fail("alignment: %s: count*sizeof(T)=%llu bytes is not a multiple of 32 (use DataCopyPad)", what, (unsigned long long)count * sizeof(T));
  emu::check_align(dst.addr_, 32, what, emu::phys_name(dst.phys()));
  dst.need(count, what);
  src.chk(0, count, what);
  emu::begin_op(emu::PI_MTE2, what);
  emu::acc_write(dst.phys(), dst.addr_, (uint64_t)count * sizeof(T));
  std::memcpy((void*)dst.ptr(), (const void*)src.buf_, (size_t)count * sizeof(T));
}
// UB -> GM (MTE3), contiguous
template <typename T> __aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  const char* what = "DataCopy(UB->GM)";
  if (src.phys() != emu::P_UB) emu::fail("%s: src position %s is not UB (L1->GM is not supported on 3510 and not emulated)", what, emu::pos_name(src.pos_));
  if ((uint64_t)count * sizeof(T) % 32) emu::fail("alignment: %s: count*sizeof(T)=%llu bytes is not a multiple of 32 (use DataCopyPad)", what, (unsigned long long)count * sizeof(T));
  emu::check_align(src.addr_, 32, what, "UB");
  src.need(count, what);
  dst.chk(0, count, what);
  emu::begin_op(emu::PI_MTE3, what);
  emu::acc_read(emu::P_UB, src.addr_, (uint64_t)count * sizeof(T));
  std::memcpy((void*)dst.buf_, (const void*)src.ptr(), (size_t)count * sizeof(T));
}
// strided GM <-> UB (blocks of blockLen*32 bytes)
template <typename T> __aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p) {
  const char* what = "DataCopy(GM->UB,params)";
  emu::check_align(dst.addr_, 32, what, "UB");
  uint64_t dbytes = p.blockCount ? (uint64_t)(p.blockCount - 1) * (p.blockLen + p.dstStride) * 32 + p.blockLen * 32 : 0;
  uint64_t sbytes = p.blockCount ? (uint64_t)(p.blockCount - 1) * (p.blockLen + p.srcStride) * 32 + p.blockLen * 32 : 0;
  dst.need(dbytes / sizeof(T), what);
  src.chk(0, sbytes / sizeof(T), what);
  emu::begin_op(emu::PI_MTE2, what);
  for (uint32_t b = 0; b < p.blockCount; ++b) emu::acc_write(dst.phys(), dst.addr_ + (uint64_t)b * (p.blockLen + p.dstStride) * 32, p.blockLen * 32);
  emu_detail::copy_blocks(dst.ptr(), src.buf_, p);
}
template <typename T> __aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
  const char* what = "DataCopy(UB->GM,params)";
  emu::check_align(src.addr_, 32, what, "UB");
  uint64_t dbytes = p.blockCount ? (uint64_t)(p.blockCount - 1) * (p.blockLen + p.dstStride) * 32 + p.blockLen * 32 : 0;
  uint64_t sbytes = p.blockCount ? (uint64_t)(p.blockCount - 1) * (p.blockLen + p.srcStride) * 32 + p.blockLen * 32 : 0;
  src.need(sbytes / sizeof(T), what);
  dst.chk(0, dbytes / sizeof(T), what);
  emu::begin_op(emu::PI_MTE3, what);
  for (uint32_t b = 0; b < p.blockCount; ++b) emu::acc_read(emu::P_UB, src.addr_ + (uint64_t)b * (p.blockLen + p.srcStride) * 32, p.blockLen * 32);
  emu_detail::copy_blocks(dst.buf_, src.ptr(), p);
}
// UB -> GM with byte-granular rows (MTE3).  blockCount rows of blockLen BYTES; each UB row starts 32 B
// aligned: the next UB row is srcStride 32-byte blocks after the end of the previous row rounded up to 32 B;
// in GM the gap between rows is dstStride BYTES.  (DataCopyPad, UB->GM direction; nothing is padded on GM.)
struct DataCopyExtParams {
  uint16_t blockCount = 1;
  uint32_t blockLen = 0, srcStride = 0, dstStride = 0, rsv = 0;
  __aicore__ DataCopyExtParams() = default;
  __aicore__ DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStride_, uint32_t dstStride_, uint32_t rsv_)
      : blockCount(count), blockLen(len), srcStride(srcStride_), dstStride(dstStride_), rsv(rsv_) {}
};
template <typename T> __aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
  const char* what = "DataCopyPad(UB->GM)";
  if (src.phys() != emu::P_UB) emu::fail("%s: src position %s is not UB", what, emu::pos_name(src.pos_));
  if (p.blockLen % sizeof(T)) emu::fail("%s: blockLen %u bytes is not a whole number of %s elements", what, p.blockLen, emu::tname<T>());
  if (p.dstStride % sizeof(T)) emu::fail("%s: dstStride %u bytes is not a whole number of elements", what, p.dstStride);
  emu::check_align(src.addr_, 32, what, "UB");
  const uint64_t src_pitch = ((uint64_t)p.blockLen + 31) / 32 * 32 + (uint64_t)p.srcStride * 32;
  const uint64_t dst_pitch = (uint64_t)p.blockLen + p.dstStride;
  if (p.blockCount) {
    src.need(((p.blockCount - 1) * src_pitch + p.blockLen) / sizeof(T), what);
    dst.chk(0, ((p.blockCount - 1) * dst_pitch + p.blockLen) / sizeof(T), what);
  }
  emu::begin_op(emu::PI_MTE3, what);
  for (uint32_t b = 0; b < p.blockCount; ++b) {
    emu::acc_read(emu::P_UB, src.addr_ + b * src_pitch, p.blockLen);
    std::memcpy((uint8_t*)dst.buf_ + b * dst_pitch, (const uint8_t*)src.ptr() + b * src_pitch, p.blockLen);
  }
}
// UB -> UB (V)
template <typename T> __aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  const char* what = "DataCopy(UB->UB)";
  if (dst.phys() != emu::P_UB || src.phys() != emu::P_UB) emu::fail("%s: only UB->UB local copies are emulated (%s->%s)", what, emu::pos_name(src.pos_), emu::pos_name(dst.pos_));
  emu::check_align(dst.addr_, 32, what, "UB dst");
  emu::check_align(src.addr_, 32, what, "UB src");
  dst.need(count, what);
  src.need(count, what);
  emu::begin_op(emu::PI_V, what);
  emu::acc_read(emu::P_UB, src.addr_, (uint64_t)count * sizeof(T));
  emu::acc_write(emu::P_UB, dst.addr_, (uint64_t)count * sizeof(T));
  std::memmove((void*)dst.ptr(), (const void*)src.ptr(), (size_t)count * sizeof(T));
}

// L1 -> L0A/L0B (MTE1).  2201 form: repeatTimes 512 B fractals, src fractal = startIndex + i*srcStride,
// dst fractal = i*(1+dstGap); ifTranspose transposes each 16x16 fractal (b16 only).
template <typename T> __aicore__ inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p) {
  const char* what = "LoadData(L1->L0,2D)";
  emu_detail::need_aic(what);
  if (src.phys() != emu::P_L1) emu::fail("%s: src position %s is not L1", what, emu::pos_name(src.pos_));
  if (dst.phys() != emu::P_L0A && dst.phys() != emu::P_L0B) emu::fail("%s: dst position %s is not L0A/L0B", what, emu::pos_name(dst.pos_));
  emu::check_align(dst.addr_, 512, what, emu::phys_name(dst.phys()));
  emu::check_align(src.addr_, 32, what, "L1");
  if (p.ifTranspose && sizeof(T) != 2) emu::fail("%s: ifTranspose is only supported for b16 types (got %s); use LoadDataWithTranspose", what, emu::tname<T>());
  const uint32_t FE = 512 / sizeof(T);
  emu::begin_op(emu::PI_MTE1, what);
  for (uint32_t i = 0; i < p.repeatTimes; ++i) {
    uint64_t sf = p.startIndex + (uint64_t)i * p.srcStride, df = (uint64_t)i * (1 + p.dstGap);
    src.need((sf + 1) * FE, what);
    dst.need((df + 1) * FE, what);
    emu::acc_read(emu::P_L1, src.addr_ + sf * 512, 512);
    emu::acc_write(dst.phys(), dst.addr_ + df * 512, 512);
    const T* s = src.ptr() + sf * FE;
    T* d = dst.ptr() + df * FE;
    if (p.ifTranspose) {
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) d[c * 16 + r] = s[r * 16 + c];
    } else {
      std::memcpy((void*)d, (const void*)s, 512);
    }
  }
}
// 3510 form: copy an (mStep x kStep) block of fractals (m in 16-row units, k in 32-byte units) from an Nz
// source with srcStride fractals per column group; non-transposed dst fractal = ki*dstStride + mi (Nz),
// transposed dst fractal = mi*dstStride + ki with each fractal transposed (Nz -> Zn, b16 only here).
template <typename T> __aicore__ inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParamsV2& p) {
  const char* what = "LoadData(L1->L0,2Dv2)";
#if EMU_ARCH == 2201
  emu::fail("%s: LoadData2DParamsV2 is the arch-3510 form; not available on 2201", what);
#endif
  emu_detail::need_aic(what);
  if (src.phys() != emu::P_L1) emu::fail("%s: src position %s is not L1", what, emu::pos_name(src.pos_));
  if (dst.phys() != emu::P_L0A && dst.phys() != emu::P_L0B) emu::fail("%s: dst position %s is not L0A/L0B", what, emu::pos_name(dst.pos_));
  emu::check_align(dst.addr_, 512, what, emu::phys_name(dst.phys()));
  emu::check_align(src.addr_, 32, what, "L1");
  if (p.ifTranspose && sizeof(T) != 2) emu::fail("%s: ifTranspose emulated only for b16 types (got %s)", what, emu::tname<T>());
  const uint32_t FE = 512 / sizeof(T);
  emu::begin_op(emu::PI_MTE1, what);
  for (uint32_t ki = 0; ki < p.kStep; ++ki)
    for (uint32_t mi = 0; mi < p.mStep; ++mi) {
      uint64_t sf = (uint64_t)(p.kStartPosition + ki) * (uint64_t)p.srcStride + (p.mStartPosition + mi);
      uint64_t df = p.ifTranspose ? (uint64_t)mi * p.dstStride + ki : (uint64_t)ki * p.dstStride + mi;
      src.need((sf + 1) * FE, what);
      dst.need((df + 1) * FE, what);
      emu::acc_read(emu::P_L1, src.addr_ + sf * 512, 512);
      emu::acc_write(dst.phys(), dst.addr_ + df * 512, 512);
      const T* s = src.ptr() + sf * FE;
      T* d = dst.ptr() + df * FE;
      if (p.ifTranspose) {
        for (int r = 0; r < 16; ++r)
          for (int c = 0; c < 16; ++c) d[c * 16 + r] = s[r * 16 + c];
      } else {
        std::memcpy((void*)d, (const void*)s, 512);
      }
    }
}

// Initialise a local tensor to a constant.  A1/B1 (L1): 32 B blocks, pipe MTE1; A2/B2 (L0A/L0B): 512 B
// blocks, arch 2201 only (3510 removed the L0A/L0B init instructions: initialise L1 and LoadData instead).
template <typename T> __aicore__ inline void InitConstValue(const LocalTensor<T>& dst, const InitConstValueParams<T>& p) {
  const char* what = "InitConstValue";
  emu_detail::need_aic(what);
  constexpr bool ok = std::is_same<T, half>::value || std::is_same<T, int16_t>::value || std::is_same<T, uint16_t>::value ||
                      std::is_same<T, bfloat16_t>::value || std::is_same<T, float>::value || std::is_same<T, int32_t>::value ||
                      std::is_same<T, uint32_t>::value;
  if (!ok) emu::fail("%s: type %s is not supported (half/int16_t/uint16_t/bfloat16_t/float/int32_t/uint32_t)", what, emu::tname<T>());
  uint32_t blk;
  if (dst.phys() == emu::P_L1) {
    blk = 32;
  } else if (dst.phys() == emu::P_L0A || dst.phys() == emu::P_L0B) {
#if EMU_ARCH == 3510
    emu::fail("%s: arch 3510 has no L0A/L0B initialisation (%s); initialise L1 and LoadData it", what, emu::pos_name(dst.pos_));
#endif
    blk = 512;
  } else {
    emu::fail("%s: position %s is not A1/B1/A2/B2", what, emu::pos_name(dst.pos_));
  }
  emu::check_align(dst.addr_, blk, what, emu::phys_name(dst.phys()));
  const uint64_t per = (uint64_t)p.blockNum * blk, pitch = per + (uint64_t)p.dstGap * blk;
  if (p.repeatTimes) dst.need(((p.repeatTimes - 1) * pitch + per) / sizeof(T), what);
  emu::begin_op(emu::PI_MTE1, what);
  for (uint32_t r = 0; r < p.repeatTimes; ++r) {
    emu::acc_write(dst.phys(), dst.addr_ + r * pitch, per);
    T* d = reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(dst.ptr()) + r * pitch);
    for (uint64_t i = 0; i < per / sizeof(T); ++i) d[i] = p.initValue;
  }
}

#if EMU_ARCH == 3510
// L1 -> L0A/L0B with MX scales (MTE1, arch 3510).  The data part is LoadData(dst, src, LoadData2DParamsV2).
// The scale part copies 32 B scale fractals (16 rows x 2 e8m0, row-major: row r's scales for K groups 2y, 2y+1
// at bytes 2r, 2r+1): fractal (x, y) for x < xStep (M or N direction, 16-row fractals), y < yStep (K direction,
// 64 K each) is read at srcMx + ((xStart + x) * srcStride + yStart + y) * 32 B and written to the MX slot of dst
// (L0A_MX / L0B_MX at dst's address / 16) + (x * dstStride + y) * 32 B.
template <typename T, typename U>
__aicore__ inline void LoadData(const LocalTensor<U>& dst, const LocalTensor<T>& src, const LocalTensor<fp8_e8m0_t>& srcMx,
                                const LoadData2DParamsV2& p, const LoadData2DMxParams& mx) {
  static_assert(sizeof(T) == sizeof(U), "LoadData MX: src and dst element widths differ");
  const char* what = "LoadData(L1->L0,MX)";
  LoadData(dst, src.template ReinterpretCast<U>(), p);  // the data part
  if (srcMx.phys() != emu::P_L1) emu::fail("%s: srcMx position %s is not L1", what, emu::pos_name(srcMx.pos_));
  emu::check_align(srcMx.addr_, 32, what, "L1 srcMx");
  const emu::Phys mxp = dst.phys() == emu::P_L0A ? emu::P_L0A_MX : emu::P_L0B_MX;
  const uint64_t mx_base = dst.addr_ / 16;
  uint8_t* mem = emu::cur().base(mxp, what);
  emu::begin_op(emu::PI_MTE1, "LoadData(L1->L0,MX scales)");
  for (uint32_t x = 0; x < mx.xStep; ++x)
    for (uint32_t y = 0; y < mx.yStep; ++y) {
      uint64_t sf = (uint64_t)(mx.xStartPosition + x) * mx.srcStride + mx.yStartPosition + y;
      uint64_t df = (uint64_t)x * mx.dstStride + y;
      srcMx.need((sf + 1) * 32, what);
      emu::acc_read(emu::P_L1, srcMx.addr_ + sf * 32, 32);
      emu::acc_write(mxp, mx_base + df * 32, 32);  // bounds-checked against the 4 KB MX slot
      std::memcpy(mem + mx_base + df * 32, reinterpret_cast<const uint8_t*>(srcMx.ptr()) + sf * 32, 32);
    }
}
#endif

// ---------------------------------------------------------------- cube
namespace emu_detail {
template <typename U, typename S> inline void check_mmad_types() {
  constexpr bool b16 = (std::is_same<U, half>::value && std::is_same<S, half>::value) ||
                       (std::is_same<U, bfloat16_t>::value && std::is_same<S, bfloat16_t>::value);
  constexpr bool f32 = std::is_same<U, float>::value && std::is_same<S, float>::value;
  constexpr bool f8 = emu::is_fp8<U>() && emu::is_fp8<S>();
  constexpr bool s8 = std::is_same<U, int8_t>::value && std::is_same<S, int8_t>::value;
  if (f8 && EMU_ARCH == 2201)
    emu::fail("Mmad: %s x %s is not supported on %s: FP8 Cube inputs need arch 3510 (Ascend 950)", emu::tname<U>(), emu::tname<S>(), emu::chip().name);
  if (!(b16 || f32 || f8 || s8)) emu::fail("Mmad: operand types %s x %s are not a documented Cube combination", emu::tname<U>(), emu::tname<S>());
}
// A element (mm,kk) in L0A: 2201 Zz (M1,K1,16,k0); 3510 Nz (K1,M1,16,k0).  GEMV: ND.
inline uint64_t l0a_index(uint32_t mm, uint32_t kk, uint32_t M1, uint32_t K1, uint32_t k0, bool gemv) {
  if (gemv) return kk;
  uint64_t frac = EMU_ARCH == 2201 ? (uint64_t)(mm / 16) * K1 + kk / k0 : (uint64_t)(kk / k0) * M1 + mm / 16;
  return frac * 16 * k0 + (mm % 16) * k0 + kk % k0;
}
}  // namespace emu_detail

// C(L0C, Nz fp32) = A(L0A) x B(L0B, Zn) [+ C]; reads ceil(m/16) x ceil(k/k0) A fractals and ceil(k/k0) x ceil(n/16) B fractals.
template <typename T, typename U, typename S>
__aicore__ inline void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter, const MmadParams& p) {
  const char* what = "Mmad";
  emu_detail::need_aic(what);
  emu_detail::check_mmad_types<U, S>();
  if (!std::is_same<T, float>::value && !std::is_same<T, int32_t>::value) emu::fail("Mmad: dst type %s must be float or int32_t", emu::tname<T>());
  if (dst.phys() != emu::P_L0C) emu::fail("Mmad: dst position %s is not CO1/L0C", emu::pos_name(dst.pos_));
  if (fm.phys() != emu::P_L0A) emu::fail("Mmad: fm position %s is not A2/L0A", emu::pos_name(fm.pos_));
  if (filter.phys() != emu::P_L0B) emu::fail("Mmad: filter position %s is not B2/L0B", emu::pos_name(filter.pos_));
  if (p.isBias) emu::fail("Mmad: isBias (BiasTable) is not emulated");
  if (p.m > 4095 || p.n > 4095 || p.k > 4095) emu::fail("Mmad: m=%u n=%u k=%u exceed 4095", p.m, p.n, p.k);
  emu::check_align(dst.addr_, 1024, what, "L0C dst");
  emu::check_align(fm.addr_, 512, what, "L0A");
  emu::check_align(filter.addr_, 512, what, "L0B");
  emu::begin_op(emu::PI_M, what);
  if (p.m == 0 || p.n == 0 || p.k == 0) return;
  const uint32_t k0 = 32 / sizeof(U);
  const uint32_t M1 = (p.m + 15) / 16, N1 = (p.n + 15) / 16, K1 = (p.k + k0 - 1) / k0;
  const bool gemv = p.m == 1 && !p.disableGemv;
  const uint64_t a_elems = gemv ? (uint64_t)K1 * k0 : (uint64_t)M1 * K1 * 16 * k0, b_elems = (uint64_t)K1 * N1 * 16 * k0, c_elems = (uint64_t)M1 * N1 * 256;
  fm.need(a_elems, what);
  filter.need(b_elems, what);
  dst.need(c_elems, what);
  emu::acc_read(emu::P_L0A, fm.addr_, a_elems * sizeof(U));
  emu::acc_read(emu::P_L0B, filter.addr_, b_elems * sizeof(S));
  if (!p.cmatrixInitVal) emu::acc_read(emu::P_L0C, dst.addr_, c_elems * sizeof(T));
  emu::acc_write(emu::P_L0C, dst.addr_, c_elems * sizeof(T));
  const uint32_t MP = M1 * 16, NP = N1 * 16, KP = K1 * k0;
  std::vector<double> A((size_t)MP * KP), B((size_t)KP * NP);
  const U* a = fm.ptr();
  const S* b = filter.ptr();
  for (uint32_t mm = 0; mm < (gemv ? 1u : MP); ++mm)
    for (uint32_t kk = 0; kk < KP; ++kk) A[(size_t)mm * KP + kk] = emu::to_d(a[emu_detail::l0a_index(mm, kk, M1, K1, k0, gemv)]);
  for (uint32_t kk = 0; kk < KP; ++kk)
    for (uint32_t nn = 0; nn < NP; ++nn) {
      uint64_t frac = (uint64_t)(kk / k0) * N1 + nn / 16;  // Zn
      B[(size_t)kk * NP + nn] = emu::to_d(b[frac * 16 * k0 + (nn % 16) * k0 + kk % k0]);
    }
  T* c = dst.ptr();
  for (uint32_t mm = 0; mm < (gemv ? 1u : MP); ++mm)
    for (uint32_t nn = 0; nn < NP; ++nn) {
      double acc = 0;
      for (uint32_t kk = 0; kk < KP; ++kk) acc += A[(size_t)mm * KP + kk] * B[(size_t)kk * NP + nn];
      uint64_t ci = (uint64_t)(nn / 16) * M1 * 256 + (uint64_t)mm * 16 + nn % 16;  // Nz
      if (p.cmatrixInitVal) c[ci] = (T)acc;
      else c[ci] = (T)((double)c[ci] + acc);
    }
}

#if EMU_ARCH == 3510
namespace emu_detail {
template <typename T> constexpr bool is_mx_operand() { return emu::is_fp8<T>() || std::is_same<T, fp4x2_e2m1_t>::value; }
template <typename T> constexpr uint32_t per_byte() { return std::is_same<T, fp4x2_e2m1_t>::value ? 2u : 1u; }
template <typename T> inline double mx_elem(const T* base, uint64_t byte, uint32_t nib) {
  if constexpr (std::is_same<T, fp4x2_e2m1_t>::value) return (double)base[byte].get((int)nib);
  else return emu::to_d(base[byte]);
}
inline double e8m0(uint8_t b) { return b == 0xFF ? NAN : std::ldexp(1.0, (int)b - 127); }
}  // namespace emu_detail
// MX cube (arch 3510): C(L0C, Nz fp32) (+)= sum_k A[m][k] 2^(sa[m][k/32]-127) * B[k][n] 2^(sb[n][k/32]-127).
// A in L0A (Nz), B in L0B (Zn), 16 x 32 B fractals (k0 = 32 fp8 or 64 fp4 elements; fp4x2 packs element 2j in
// the low nibble).  The scales are read from the MX slots at fm / filter address / 16, laid out as LoadData MX
// writes them with dstStride = k / 64: scale fractal (row / 16) * (k / 64) + kgroup / 64, byte (row % 16) * 2 + (k / 32) % 2.
// k must be a multiple of 64; GEMV mode (m == 1 without disableGemv) is not emulated for MmadMx.
template <typename T, typename U, typename S>
__aicore__ inline void MmadMx(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter, const MmadParams& p) {
  const char* what = "MmadMx";
  emu_detail::need_aic(what);
  if (!emu_detail::is_mx_operand<U>() || !emu_detail::is_mx_operand<S>())
    emu::fail("MmadMx: operand types %s x %s are not fp8_e4m3fn_t/fp8_e5m2_t/fp4x2_e2m1_t", emu::tname<U>(), emu::tname<S>());
  if (!std::is_same<T, float>::value) emu::fail("MmadMx: dst type %s must be float", emu::tname<T>());
  if (dst.phys() != emu::P_L0C) emu::fail("MmadMx: dst position %s is not CO1/L0C", emu::pos_name(dst.pos_));
  if (fm.phys() != emu::P_L0A) emu::fail("MmadMx: fm position %s is not A2/L0A", emu::pos_name(fm.pos_));
  if (filter.phys() != emu::P_L0B) emu::fail("MmadMx: filter position %s is not B2/L0B", emu::pos_name(filter.pos_));
  if (p.isBias) emu::fail("MmadMx: isBias (BiasTable) is not emulated");
  if (p.m > 4095 || p.n > 4095 || p.k > 4095) emu::fail("MmadMx: m=%u n=%u k=%u exceed 4095", p.m, p.n, p.k);
  if (p.k % 64) emu::fail("MmadMx: k=%u is not a multiple of 64 (one 16 x 2 e8m0 scale fractal covers 64 K)", p.k);
  if (p.m == 1 && !p.disableGemv) emu::fail("MmadMx: m == 1 selects GEMV mode (ND L0A), not emulated for MmadMx: set disableGemv");
  emu::check_align(dst.addr_, 1024, what, "L0C dst");
  emu::check_align(fm.addr_, emu::is_fp8<U>() ? 1024 : 512, what, "L0A");
  emu::check_align(filter.addr_, emu::is_fp8<S>() ? 1024 : 512, what, "L0B");
  emu::begin_op(emu::PI_M, what);
  if (p.m == 0 || p.n == 0 || p.k == 0) return;
  const uint32_t pa = emu_detail::per_byte<U>(), pb = emu_detail::per_byte<S>();
  const uint32_t M1 = (p.m + 15) / 16, N1 = (p.n + 15) / 16, KA = p.k / pa, KB = p.k / pb, K2 = p.k / 64;
  const uint64_t a_bytes = (uint64_t)M1 * 16 * KA, b_bytes = (uint64_t)N1 * 16 * KB, c_elems = (uint64_t)M1 * N1 * 256;
  fm.need(a_bytes, what);
  filter.need(b_bytes, what);
  dst.need(c_elems, what);
  const uint64_t amx = fm.addr_ / 16, bmx = filter.addr_ / 16;
  emu::acc_read(emu::P_L0A, fm.addr_, a_bytes);
  emu::acc_read(emu::P_L0B, filter.addr_, b_bytes);
  emu::acc_read(emu::P_L0A_MX, amx, (uint64_t)M1 * K2 * 32);
  emu::acc_read(emu::P_L0B_MX, bmx, (uint64_t)N1 * K2 * 32);
  if (!p.cmatrixInitVal) emu::acc_read(emu::P_L0C, dst.addr_, c_elems * sizeof(T));
  emu::acc_write(emu::P_L0C, dst.addr_, c_elems * sizeof(T));
  const uint8_t* sa = emu::cur().base(emu::P_L0A_MX, what) + amx;
  const uint8_t* sb = emu::cur().base(emu::P_L0B_MX, what) + bmx;
  const uint32_t MP = M1 * 16, NP = N1 * 16, KP = p.k;
  std::vector<double> A((size_t)MP * KP), B((size_t)KP * NP);
  const U* a = fm.ptr();
  const S* b = filter.ptr();
  for (uint32_t mm = 0; mm < MP; ++mm)
    for (uint32_t kk = 0; kk < KP; ++kk) {
      uint32_t kb = kk / pa;  // byte column
      uint64_t byte = ((uint64_t)(kb / 32) * M1 + mm / 16) * 512 + (mm % 16) * 32 + kb % 32;  // Nz
      double s = emu_detail::e8m0(sa[((uint64_t)(mm / 16) * K2 + kk / 64) * 32 + (mm % 16) * 2 + (kk / 32) % 2]);
      A[(size_t)mm * KP + kk] = emu_detail::mx_elem(a, byte, kk % pa) * s;
    }
  for (uint32_t kk = 0; kk < KP; ++kk)
    for (uint32_t nn = 0; nn < NP; ++nn) {
      uint32_t kb = kk / pb;
      uint64_t byte = ((uint64_t)(kb / 32) * N1 + nn / 16) * 512 + (nn % 16) * 32 + kb % 32;  // Zn
      double s = emu_detail::e8m0(sb[((uint64_t)(nn / 16) * K2 + kk / 64) * 32 + (nn % 16) * 2 + (kk / 32) % 2]);
      B[(size_t)kk * NP + nn] = emu_detail::mx_elem(b, byte, kk % pb) * s;
    }
  T* c = dst.ptr();
  for (uint32_t mm = 0; mm < MP; ++mm)
    for (uint32_t nn = 0; nn < NP; ++nn) {
      double acc = 0;
      for (uint32_t kk = 0; kk < KP; ++kk) acc += A[(size_t)mm * KP + kk] * B[(size_t)kk * NP + nn];
      uint64_t ci = (uint64_t)(nn / 16) * M1 * 256 + (uint64_t)mm * 16 + nn % 16;  // Nz
      if (p.cmatrixInitVal) c[ci] = (T)acc;
      else c[ci] = (T)((double)c[ci] + acc);
    }
}
#endif

// ---------------------------------------------------------------- L0C -> GM (FIX)
namespace emu_detail {
inline float deq_scale(uint64_t s) {
  uint32_t b = (uint32_t)(s & 0xFFFFFFFFu) & 0xFFFFE000u;  // scale used in (1,8,10) format: low 13 mantissa bits ignored
  return emu::fp::b2f(b);
}
template <typename T, typename U, CO2Layout fmt>
inline void fixpipe_impl(T* dptr, uint64_t dcap, bool dst_is_ub, uint32_t dst_addr, const LocalTensor<U>& src, const FixpipeParamsV220& p) {
  const char* what = dst_is_ub ? "Fixpipe(L0C->UB)" : "Fixpipe(L0C->GM)";
  need_aic(what);
  if (fmt != CO2Layout::ROW_MAJOR) emu::fail("%s: only CFG_ROW_MAJOR (NZ->ND) is emulated", what);
  if (src.phys() != emu::P_L0C) emu::fail("%s: src position %s is not CO1/L0C", what, emu::pos_name(src.pos_));
  if (!std::is_same<U, float>::value) emu::fail("%s: src type %s (only float L0C emulated)", what, emu::tname<U>());
  emu::check_align(src.addr_, 64, what, "L0C src");
  if (p.ndNum > 1) emu::fail("%s: ndNum>1 not emulated", what);
  if (p.srcStride < (p.mSize + 15) / 16 * 16) emu::fail("%s: srcStride %u < mSize %u rounded up to 16", what, p.srcStride, p.mSize);
  if (p.nSize > 4095) emu::fail("%s: nSize %u > 4095", what, p.nSize);
  float scale = 1.0f;
  bool ok;
  switch (p.quantPre) {
    case QuantMode_t::NoQuant: ok = std::is_same<T, float>::value; break;
    case QuantMode_t::F322BF16: ok = std::is_same<T, bfloat16_t>::value; break;
    case QuantMode_t::F322F16: ok = std::is_same<T, half>::value; break;
#if EMU_ARCH == 3510
    case QuantMode_t::QF322F32_PRE: ok = std::is_same<T, float>::value; scale = deq_scale(p.deqScalar); break;
    case QuantMode_t::QF322BF16_PRE: ok = std::is_same<T, bfloat16_t>::value; scale = deq_scale(p.deqScalar); break;
    case QuantMode_t::QF322F16_PRE: ok = std::is_same<T, half>::value; scale = deq_scale(p.deqScalar); break;
    case QuantMode_t::QF322FP8_PRE: ok = std::is_same<T, fp8_e4m3fn_t>::value; scale = deq_scale(p.deqScalar); break;
#endif
    default: emu::fail("%s: quantPre mode %d not emulated on %s", what, (int)p.quantPre, emu::chip().name);
  }
  if (!ok) emu::fail("%s: quantPre mode %d does not produce dst type %s", what, (int)p.quantPre, emu::tname<T>());
  uint64_t M1 = p.srcStride / 16, N1 = (p.nSize + 15) / 16;
  uint64_t src_elems = N1 * M1 * 256;
  src.need(src_elems, what);
  uint64_t dext = p.mSize ? (uint64_t)(p.mSize - 1) * p.dstStride + p.nSize : 0;
  if (p.nSize > p.dstStride && p.mSize > 1) emu::fail("%s: dstStride %u < nSize %u", what, p.dstStride, p.nSize);
  if (dcap && dext > dcap) emu::fail("%s: destination access of %llu elements exceeds %llu", what, (unsigned long long)dext, (unsigned long long)dcap);
  emu::begin_op(emu::PI_FIX, what);
  emu::acc_read(emu::P_L0C, src.addr_, src_elems * 4);
  if (dst_is_ub) emu::acc_write(emu::P_UB, dst_addr, dext * sizeof(T));
  const U* s = src.ptr();
  for (uint32_t m = 0; m < p.mSize; ++m)
    for (uint32_t n = 0; n < p.nSize; ++n) {
      float v = (float)s[(uint64_t)(n / 16) * p.srcStride * 16 + (uint64_t)m * 16 + n % 16] * scale;
      if (p.reluEn && v < 0) v = 0;
      dptr[(uint64_t)m * p.dstStride + n] = emu::from_d<T>(v);
    }
}
}  // namespace emu_detail
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
__aicore__ inline void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsV220& p) {
  if (!dst.buf_) emu::fail("Fixpipe: dst GlobalTensor has no buffer");
  emu_detail::fixpipe_impl<T, U, config.format>(dst.buf_, dst.size_, false, 0, src, p);
}
#if EMU_ARCH == 3510
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
__aicore__ inline void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsArch3510<config.format>& p) {
  if (!dst.buf_) emu::fail("Fixpipe: dst GlobalTensor has no buffer");
  emu_detail::fixpipe_impl<T, U, config.format>(dst.buf_, dst.size_, false, 0, src, p);
}
#endif

// ---------------------------------------------------------------- vector (count form, V pipe, UB only)
namespace emu_detail {
template <typename T> inline void vchk(const LocalTensor<T>& t, int32_t count, const char* what, const char* role) {
  if (t.phys() != emu::P_UB) emu::fail("%s: %s position %s is not a UB position (VECIN/VECOUT/VECCALC)", what, role, emu::pos_name(t.pos_));
  if (count < 0) emu::fail("%s: negative count %d", what, count);
  emu::check_align(t.addr_, 32, what, role);
  t.need((uint64_t)count, what);
}
template <typename T, typename F> inline void binop(const LocalTensor<T>& d, const LocalTensor<T>& a, const LocalTensor<T>& b, int32_t n, const char* what, F f) {
  vchk(d, n, what, "dst"); vchk(a, n, what, "src0"); vchk(b, n, what, "src1");
  emu::begin_op(emu::PI_V, what);
  emu::acc_read(emu::P_UB, a.addr_, (uint64_t)n * sizeof(T));
  emu::acc_read(emu::P_UB, b.addr_, (uint64_t)n * sizeof(T));
  emu::acc_write(emu::P_UB, d.addr_, (uint64_t)n * sizeof(T));
  T *pd = d.ptr(); const T *pa = a.ptr(), *pb = b.ptr();
  for (int32_t i = 0; i < n; ++i) pd[i] = emu::from_d<T>(f(emu::to_d(pa[i]), emu::to_d(pb[i])));
}
template <typename T, typename F> inline void unop(const LocalTensor<T>& d, const LocalTensor<T>& a, int32_t n, const char* what, F f) {
  vchk(d, n, what, "dst"); vchk(a, n, what, "src");
  emu::begin_op(emu::PI_V, what);
  emu::acc_read(emu::P_UB, a.addr_, (uint64_t)n * sizeof(T));
  emu::acc_write(emu::P_UB, d.addr_, (uint64_t)n * sizeof(T));
  T* pd = d.ptr(); const T* pa = a.ptr();
  for (int32_t i = 0; i < n; ++i) pd[i] = emu::from_d<T>(f(emu::to_d(pa[i])));
}
// fp32 intermediate rounding for float/half/bf16 vector arithmetic
inline double r32(double x) { return (double)(float)x; }
}  // namespace emu_detail
template <typename T> __aicore__ inline void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
  emu_detail::binop(dst, src0, src1, count, "Add", [](double a, double b) { return emu_detail::r32(a + b); });
}
template <typename T> __aicore__ inline void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
  emu_detail::binop(dst, src0, src1, count, "Sub", [](double a, double b) { return emu_detail::r32(a - b); });
}
template <typename T> __aicore__ inline void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
  emu_detail::binop(dst, src0, src1, count, "Mul", [](double a, double b) { return emu_detail::r32(a * b); });
}
template <typename T> __aicore__ inline void Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
  emu_detail::binop(dst, src0, src1, count, "Div", [](double a, double b) { return emu_detail::r32(a / b); });
}
template <typename T> __aicore__ inline void Max(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
  emu_detail::binop(dst, src0, src1, count, "Max", [](double a, double b) { return a > b ? a : b; });
}
template <typename T> __aicore__ inline void Min(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
  emu_detail::binop(dst, src0, src1, count, "Min", [](double a, double b) { return a < b ? a : b; });
}
template <typename T, bool isSetMask = true> __aicore__ inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) {
  double s = emu::to_d(scalarValue);
  emu_detail::unop(dst, src, count, "Muls", [s](double a) { return emu_detail::r32(a * s); });
}
template <typename T, bool isSetMask = true> __aicore__ inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) {
  double s = emu::to_d(scalarValue);
  emu_detail::unop(dst, src, count, "Adds", [s](double a) { return emu_detail::r32(a + s); });
}
template <typename T, bool isSetMask = true> __aicore__ inline void Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) {
  double s = emu::to_d(scalarValue);
  emu_detail::unop(dst, src, count, "Maxs", [s](double a) { return a > s ? a : s; });
}
template <typename T> __aicore__ inline void Exp(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count) {
  emu_detail::unop(dst, src, count, "Exp", [](double a) { return emu_detail::r32(std::exp(a)); });
}
template <typename T> __aicore__ inline void Relu(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count) {
  emu_detail::unop(dst, src, count, "Relu", [](double a) { return a > 0 ? a : 0.0; });
}
// dst = dst + src * scalar
template <typename T, typename U> __aicore__ inline void Axpy(const LocalTensor<T>& dst, const LocalTensor<U>& src, const U scalarValue, const int32_t& count) {
  const char* what = "Axpy";
  emu_detail::vchk(dst, count, what, "dst");
  emu_detail::vchk(src, count, what, "src");
  emu::begin_op(emu::PI_V, what);
  emu::acc_read(emu::P_UB, src.addr_, (uint64_t)count * sizeof(U));
  emu::acc_read(emu::P_UB, dst.addr_, (uint64_t)count * sizeof(T));
  emu::acc_write(emu::P_UB, dst.addr_, (uint64_t)count * sizeof(T));
  double s = emu::to_d(scalarValue);
  T* pd = dst.ptr(); const U* ps = src.ptr();
  for (int32_t i = 0; i < count; ++i) pd[i] = emu::from_d<T>(emu_detail::r32(emu::to_d(pd[i]) + emu_detail::r32(emu::to_d(ps[i]) * s)));
}
template <typename T> __aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
  const char* what = "Duplicate";
  emu_detail::vchk(dst, count, what, "dst");
  emu::begin_op(emu::PI_V, what);
  emu::acc_write(emu::P_UB, dst.addr_, (uint64_t)count * sizeof(T));
  T* pd = dst.ptr();
  for (int32_t i = 0; i < count; ++i) pd[i] = scalarValue;
}
template <typename T, typename U> __aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& round_mode, const uint32_t count) {
  const char* what = "Cast";
  emu_detail::vchk(dst, (int32_t)count, what, "dst");
  emu_detail::vchk(src, (int32_t)count, what, "src");
  emu::begin_op(emu::PI_V, what);
  emu::acc_read(emu::P_UB, src.addr_, (uint64_t)count * sizeof(U));
  emu::acc_write(emu::P_UB, dst.addr_, (uint64_t)count * sizeof(T));
  T* pd = dst.ptr(); const U* ps = src.ptr();
  for (uint32_t i = 0; i < count; ++i) {
    double v = emu::to_d(ps[i]);
    if constexpr (std::is_integral<T>::value) {
      switch (round_mode) {
        case RoundMode::CAST_FLOOR: v = std::floor(v); break;
        case RoundMode::CAST_CEIL: v = std::ceil(v); break;
        case RoundMode::CAST_TRUNC: case RoundMode::CAST_ZERO: v = std::trunc(v); break;
        case RoundMode::CAST_ROUND: v = std::round(v); break;
        default: v = std::nearbyint(v); break;
      }
      pd[i] = (T)v;
    } else {
      // float targets: round-to-nearest-even (CAST_RINT/CAST_NONE/CAST_EVEN); other modes approximated by RNE
      pd[i] = emu::from_d<T>(v);
    }
  }
}

// ---------------------------------------------------------------- cross-core sync
template <uint8_t modeId, pipe_t pipe> __aicore__ inline void CrossCoreSetFlag(uint16_t flagId) {
  emu::CoreCtx& c = emu::cur();
  emu::Global& g = emu::G();
  if (flagId > 10) emu::fail("CrossCoreSetFlag: flagId %u > 10 (core %s)", flagId, c.name.c_str());
  std::unique_lock<std::mutex> lk(g.mu);
  auto bump = [&](int idx) {
    if (++g.xflag[idx][flagId] > 15)
      emu::fail("CrossCoreSetFlag<%u>(%u): flag counter on core %s exceeds 15 (set without matching waits)", modeId, flagId, g.cores[idx]->name.c_str());
  };
  if (modeId == 0) {
    (c.is_aic ? g.mode0_sets_aic : g.mode0_sets_aiv)[flagId]++;
  } else if (modeId == 1) {
    if (c.is_aic) emu::fail("CrossCoreSetFlag mode 1 (AIV<->AIV of one core) called on AIC %s", c.name.c_str());
    int base = g.n_aic + c.aic_id * g.ratio;
    for (int s = 0; s < g.ratio; ++s) if (s != c.sub_idx) bump(base + s);
  } else if (modeId == 2 || modeId == 4) {
    if (c.is_aic) {
      int base = g.n_aic + c.aic_id * g.ratio;
      int ns = modeId == 4 ? 1 : g.ratio;
      if (g.n_aiv == 0) emu::fail("CrossCoreSetFlag<%u>: AIC %s has no AIV partner (launch mode has no vector cores)", modeId, c.name.c_str());
      for (int s = 0; s < ns; ++s) bump(base + s);
    } else {
      int me = emu::core_index(c);
      if (modeId == 4 || c.sub_num == 1) {
        bump(c.aic_id);
      } else {
        // 1:2 AIV->AIC: the AIC's flag fires once both AIVs have set it
        g.half2[me][flagId]++;
        int base = g.n_aic + c.aic_id * g.ratio;
        bool all = true;
        for (int s = 0; s < c.sub_num; ++s) all = all && g.half2[base + s][flagId] > 0;
        if (all) {
          for (int s = 0; s < c.sub_num; ++s) g.half2[base + s][flagId]--;
          bump(c.aic_id);
        }
      }
    }
  } else {
    emu::fail("CrossCoreSetFlag: modeId %u is not one of 0,1,2,4", modeId);
  }
  g.cv.notify_all();
}
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S> __aicore__ inline void CrossCoreWaitFlag(uint16_t flagId) {
  emu::CoreCtx& c = emu::cur();
  emu::Global& g = emu::G();
  if (flagId > 10) emu::fail("CrossCoreWaitFlag: flagId %u > 10 (core %s)", flagId, c.name.c_str());
  std::unique_lock<std::mutex> lk(g.mu);
  int me = emu::core_index(c);
  std::string what = "CrossCoreWaitFlag(flagId=" + std::to_string(flagId) + ")";
  if (modeId == 0) {
    int& nw = g.mode0_waits[me][flagId];
    int need = (nw + 1) * (c.is_aic ? g.n_aic : g.n_aiv);
    auto* sets = c.is_aic ? &g.mode0_sets_aic : &g.mode0_sets_aiv;
    // a mode-0 wait is satisfied by either group-wide mode-0 sets or point-to-point sets to this core
    emu::block_until(lk, [&, sets, need] { return (*sets)[flagId] >= need || g.xflag[me][flagId] > 0; }, what);
    if ((*sets)[flagId] >= need) nw++;
    else g.xflag[me][flagId]--;
  } else {
    emu::block_until(lk, [&] { return g.xflag[me][flagId] > 0; }, what);
    g.xflag[me][flagId]--;
  }
}
template <bool isAIVOnly = true> __aicore__ inline void SyncAll() {
  emu::CoreCtx& c = emu::cur();
  emu::Global& g = emu::G();
  std::unique_lock<std::mutex> lk(g.mu);
  int t = c.is_aic ? 0 : 1;
  int n = c.is_aic ? g.n_aic : g.n_aiv;
  int gen = g.syncall_gen[t];
  if (++g.syncall_arrived[t] == n) {
    g.syncall_arrived[t] = 0;
    g.syncall_gen[t]++;
    g.cv.notify_all();
    return;
  }
  emu::block_until(lk, [&, t, gen] { return g.syncall_gen[t] != gen; }, "SyncAll()");
}

// CPU-debug style kernel mode (subset)
enum class KernelMode { MIX_MODE = 0, AIC_MODE, AIV_MODE, MIX_AIC_1_1 };
}  // namespace AscendC

// =====================================================================================
// launcher
// =====================================================================================
namespace emu {
enum class Mode { AIC_ONLY, AIV_ONLY, MIX_1_1, MIX_1_2 };
inline const char* mode_name(Mode m) {
  switch (m) { case Mode::AIC_ONLY: return "AIC_ONLY"; case Mode::AIV_ONLY: return "AIV_ONLY"; case Mode::MIX_1_1: return "MIX_1_1"; default: return "MIX_1_2"; }
}
inline void end_of_kernel_checks(CoreCtx& c) {
  for (int e = 0; e < kMaxHardEvent; ++e)
    for (int id = 0; id < 8; ++id)
      if (c.flags[e][id].set) {
        int s, d;
        event_pipes((AscendC::HardEvent)e, s, d);
        fail("unpaired SetFlag<HardEvent::%s>(%d) on core %s: flag still set at kernel end (no matching WaitFlag)", event_name(s, d).c_str(), id, c.name.c_str());
      }
}
// Runs kernel(args...) on numBlocks AI cores: AIC threads and/or AIV threads (2 per AIC in MIX_1_2).
template <typename F, typename... Args> void Launch(F kernel, uint32_t numBlocks, Mode mode, Args... args) {
  if (numBlocks == 0) fail("Launch: numBlocks == 0");
  if (mode == Mode::MIX_1_2 && EMU_ARCH == 2201) { /* 1:2 mix is documented for 2201 too */ }
  Global& g = G();
  int n_aic = (mode == Mode::AIV_ONLY) ? 0 : (int)numBlocks;
  int ratio = mode == Mode::MIX_1_2 ? 2 : 1;
  int n_aiv = mode == Mode::AIC_ONLY ? 0 : (mode == Mode::AIV_ONLY ? (int)numBlocks : (int)numBlocks * ratio);
  std::vector<std::unique_ptr<CoreCtx>> ctx;
  for (int i = 0; i < n_aic; ++i) {
    auto c = std::make_unique<CoreCtx>();
    c->is_aic = true; c->block_idx = i; c->aic_id = i; c->num_blocks = (int)numBlocks; c->sub_num = 1;
    c->name = "AIC" + std::to_string(i);
    ctx.push_back(std::move(c));
  }
  for (int i = 0; i < n_aiv; ++i) {
    auto c = std::make_unique<CoreCtx>();
    c->is_aic = false;
    c->num_blocks = (int)numBlocks;
    if (mode == Mode::AIV_ONLY) { c->block_idx = i; c->sub_idx = 0; c->sub_num = 1; c->aic_id = i; }
    else { c->block_idx = i; c->sub_idx = i % ratio; c->sub_num = ratio; c->aic_id = i / ratio; }
    c->name = "AIV" + std::to_string(i);
    ctx.push_back(std::move(c));
  }
  {
    std::lock_guard<std::mutex> lk(g.mu);
    g.cores.clear();
    for (auto& c : ctx) g.cores.push_back(c.get());
    g.waiters.assign(ctx.size(), Waiter{});
    g.xflag.assign(ctx.size(), std::array<int, 16>{});
    g.half2.assign(ctx.size(), std::array<int, 16>{});
    g.mode0_waits.assign(ctx.size(), std::array<int, 16>{});
    g.mode0_sets_aic = {}; g.mode0_sets_aiv = {};
    g.n_aic = n_aic; g.n_aiv = n_aiv; g.ratio = (mode == Mode::AIV_ONLY) ? 1 : ratio;
    g.alive = (int)ctx.size();
    g.syncall_arrived[0] = g.syncall_arrived[1] = 0;
  }
  std::vector<std::thread> th;
  for (auto& cp : ctx) {
    CoreCtx* c = cp.get();
    th.emplace_back([c, kernel, args...]() {
      g_cur = c;
      c->init_mem(c->is_aic);
      kernel(args...);
      end_of_kernel_checks(*c);
      std::lock_guard<std::mutex> lk(G().mu);
      G().alive--;
      G().cv.notify_all();
      check_deadlock_locked();
      g_cur = nullptr;
    });
  }
  for (auto& t : th) t.join();
  for (int i = 0; i < (int)ctx.size(); ++i)
    for (int f = 0; f < 16; ++f)
      if (g.xflag[i][f] != 0 && std::getenv("ASCENDC_EMU_STRICT_XFLAG"))
        fail("cross-core flag %d on %s left with count %d at kernel end", f, ctx[i]->name.c_str(), g.xflag[i][f]);
}
inline Mode& default_mode() { static Mode m = Mode::MIX_1_2; return m; }
}  // namespace emu

namespace AscendC {
inline void SetKernelMode(KernelMode m) {
  emu::default_mode() = m == KernelMode::AIC_MODE ? emu::Mode::AIC_ONLY : m == KernelMode::AIV_MODE ? emu::Mode::AIV_ONLY
                        : m == KernelMode::MIX_AIC_1_1 ? emu::Mode::MIX_1_1 : emu::Mode::MIX_1_2;
}
inline uint8_t* GmAlloc(size_t size) { return static_cast<uint8_t*>(std::calloc(size ? size : 1, 1)); }
inline void GmFree(void* p) { std::free(p); }
}  // namespace AscendC
#define ICPU_RUN_KF(func, blockDim, ...) ::emu::Launch(func, blockDim, ::emu::default_mode(), __VA_ARGS__)
#define ICPU_SET_TILING_KEY(k)
