// tilus device library: the helpers the emitted CUDA code calls. Handed to NVRTC as the
// in-memory header "tilus/device.h"; needs only cuda_fp16.h / cuda_bf16.h.
//
// The 16-bit float parts are guarded so that a kernel parses only the NVIDIA headers it needs
// (they are most of the header's compile time): nvrtc_compile passes -DTILUS_DEVICE_NO_BF16
// when the source never names a bfloat16, and -DTILUS_DEVICE_NO_FP16 too when it never names a
// half (src/codegen/nvrtc.cpp, device_header_defines). Anything that names __half belongs
// inside `#ifdef TILUS_DEVICE_FP16`, anything that names __nv_bfloat16 inside
// `#ifdef TILUS_DEVICE_BF16` (tests/cpp/test_nvrtc.cpp compiles every variant). Without the
// macros the whole library is there.
#pragma once

#ifndef TILUS_DEVICE_NO_BF16
#define TILUS_DEVICE_BF16 1
#include <cuda_bf16.h>  // includes cuda_fp16.h
#endif
#if !defined(TILUS_DEVICE_NO_FP16) || defined(TILUS_DEVICE_BF16)
#define TILUS_DEVICE_FP16 1
#include <cuda_fp16.h>
#endif

typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;  // LP64, as glibc: redeclaring the same type is legal when a libc header came first
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;

namespace tilus {

// ---- conversions --------------------------------------------------------------------------
// cvt<To>(x): every conversion goes through float (or double) where a direct one is
// missing, rounding to nearest even like the host (DataType::encode_float).
template <class T> struct is_half_like { static constexpr bool value = false; };
#ifdef TILUS_DEVICE_FP16
template <> struct is_half_like<__half> { static constexpr bool value = true; };
#endif
#ifdef TILUS_DEVICE_BF16
template <> struct is_half_like<__nv_bfloat16> { static constexpr bool value = true; };
#endif

template <class From> __device__ __forceinline__ float to_float(From x) { return static_cast<float>(x); }
#ifdef TILUS_DEVICE_FP16
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
#endif
#ifdef TILUS_DEVICE_BF16
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
#endif

template <class To> struct Convert {
  template <class From> __device__ __forceinline__ static To run(From x) {
    if constexpr (is_half_like<From>::value) return static_cast<To>(to_float(x));
    else return static_cast<To>(x);
  }
};
#ifdef TILUS_DEVICE_FP16
template <> struct Convert<__half> {
  template <class From> __device__ __forceinline__ static __half run(From x) {
    if constexpr (is_half_like<From>::value) return __float2half_rn(to_float(x));
    else if constexpr (sizeof(From) == 8 && static_cast<From>(0.5) != 0) return __double2half(static_cast<double>(x));
    else return __float2half_rn(static_cast<float>(x));
  }
};
#endif
#ifdef TILUS_DEVICE_BF16
template <> struct Convert<__nv_bfloat16> {
  template <class From> __device__ __forceinline__ static __nv_bfloat16 run(From x) {
    if constexpr (is_half_like<From>::value) return __float2bfloat16_rn(to_float(x));
    else return __float2bfloat16_rn(static_cast<float>(x));
  }
};
#endif
template <> struct Convert<bool> {
  template <class From> __device__ __forceinline__ static bool run(From x) {
    if constexpr (is_half_like<From>::value) return to_float(x) != 0.0f;
    else return x != From(0);
  }
};

// ---- low-precision scalars ------------------------------------------------------------------
__device__ __forceinline__ uint32_t sign_bit(float x) { return uint32_t(__float_as_int(x)) >> 31; }
__device__ __forceinline__ uint32_t sign_bit(double x) { return uint32_t(uint64_t(__double_as_longlong(x)) >> 63); }
__device__ __forceinline__ float frexp_(float x, int* e) { return frexpf(x, e); }
__device__ __forceinline__ double frexp_(double x, int* e) { return frexp(x, e); }
__device__ __forceinline__ float ldexp_(float x, int e) { return ldexpf(x, e); }
__device__ __forceinline__ double ldexp_(double x, int e) { return ldexp(x, e); }
__device__ __forceinline__ float floor_(float x) { return floorf(x); }
__device__ __forceinline__ double floor_(double x) { return floor(x); }
// Sub-byte integers (int1-int7, uint1-uint7): the value, sign- or zero-extended, in a byte;
// arithmetic happens in int and the result wraps to N bits when converted back.
template <int N, bool Signed> struct subint {
  int8_t v;
  subint() = default;
  __device__ __forceinline__ constexpr subint(long long x) : v(wrap(x)) {}
  __device__ __forceinline__ constexpr operator int() const { return v; }
  __device__ __forceinline__ constexpr uint32_t code() const { return uint32_t(v) & ((1u << N) - 1u); }
  __device__ __forceinline__ static constexpr subint from_code(uint32_t c) { return subint((long long)c); }
  __device__ __forceinline__ static constexpr int8_t wrap(long long x) {
    uint32_t c = uint32_t(x) & ((1u << N) - 1u);
    return int8_t(Signed && (c >> (N - 1)) ? (c | ~((1u << N) - 1u)) : c);
  }
};

// fp8 and the sub-byte floats: the code in the low Bits bits of a byte. Style 0 is IEEE
// (infinities and NaNs), 1 finite with one NaN (e4m3), 2 finite (no NaN: the MX sub-byte
// floats). Reads convert to float exactly; writes round to nearest even and overflow as the
// style says -- the same algorithm as the host's DataType::encode_float, so both backends and
// the host agree bit for bit.
template <int Bits, int E, int M, int Style> struct lowfloat {
  uint8_t bits;
  lowfloat() = default;
  __device__ __forceinline__ lowfloat(float x) : bits(encode(x)) {}
  __device__ __forceinline__ operator float() const { return decode(bits); }
  __device__ __forceinline__ constexpr uint32_t code() const { return bits; }
  __device__ __forceinline__ static lowfloat from_code(uint32_t c) {
    lowfloat r;
    r.bits = uint8_t(c & ((1u << Bits) - 1u));
    return r;
  }
  static constexpr int bias = (1 << (E - 1)) - 1;
  static constexpr uint32_t exp_all = (1u << E) - 1u, man_all = (1u << M) - 1u;
  // The largest finite value's biased exponent and mantissa.
  static constexpr uint32_t max_exp = Style == 0 ? exp_all - 1u : exp_all;
  static constexpr uint32_t max_man = Style == 1 ? man_all - 1u : man_all;
  __device__ __forceinline__ static float decode(uint32_t c) {
    uint32_t sign = (c >> (E + M)) & 1u, exp = (c >> M) & exp_all, man = c & man_all;
    float v;
    if (Style == 0 && exp == exp_all) v = man ? __int_as_float(0x7fc00000) : __int_as_float(0x7f800000);
    else if (Style == 1 && exp == exp_all && man == man_all) v = __int_as_float(0x7fc00000);
    else if (exp == 0) v = float(man) * __int_as_float((127 + 1 - bias - M) << 23);  // subnormal: man units
    else v = __int_as_float(int(((exp + 127u - bias) << 23) | (man << (23 - M))));
    return sign ? -v : v;
  }
  template <class F> __device__ __forceinline__ static uint8_t encode(F x) {
    auto finish = [](uint32_t sign, uint32_t exp, uint32_t man) { return uint8_t((sign << (E + M)) | (exp << M) | man); };
    uint32_t sign = sign_bit(x);
    if (x != x) {
      if (Style == 0) return finish(0, exp_all, M > 0 ? 1u << (M - 1) : 0u);
      if (Style == 1) return finish(0, exp_all, man_all);
      return finish(0, max_exp, max_man);
    }
    F a = sign ? -x : x;
    if (a - a != F(0)) return Style == 0 ? finish(sign, exp_all, 0) : finish(sign, max_exp, max_man);  // infinity
    if (a == F(0)) return finish(sign, 0, 0);
    int e;
    frexp_(a, &e);  // a = f * 2^e, f in [0.5, 1)
    int unbiased = e - 1, min_normal = 1 - bias;
    int quantum = (unbiased < min_normal ? min_normal : unbiased) - M;
    F scaled = ldexp_(a, -quantum);  // exact; below 2^(M+1) units of 2^quantum
    F whole = floor_(scaled), frac = scaled - whole;
    uint32_t q = uint32_t(whole);
    if (frac > F(0.5) || (frac == F(0.5) && (q & 1u))) q += 1u;
    uint32_t biased, man;
    if (unbiased < min_normal) {
      biased = (q >> M) ? 1u : 0u;
      man = q & man_all;
    } else {
      int exp = unbiased;
      if (q >> (M + 1)) {
        q >>= 1;
        exp += 1;
      }
      if (exp + bias > int(max_exp)) return Style == 0 ? finish(sign, exp_all, 0) : finish(sign, max_exp, max_man);
      biased = uint32_t(exp + bias);
      man = q & man_all;
    }
    if (biased > max_exp || (biased == max_exp && man > max_man))
      return Style == 0 ? finish(sign, exp_all, 0) : finish(sign, max_exp, max_man);
    return finish(sign, biased, man);
  }
};

template <class T> struct is_float_like { static constexpr bool value = is_half_like<T>::value; };
template <> struct is_float_like<float> { static constexpr bool value = true; };
template <> struct is_float_like<double> { static constexpr bool value = true; };
template <int B, int E, int M, int S> struct is_float_like<lowfloat<B, E, M, S>> { static constexpr bool value = true; };

template <int B, int E, int M, int S> struct Convert<lowfloat<B, E, M, S>> {
  template <class From> __device__ __forceinline__ static lowfloat<B, E, M, S> run(From x) {
    lowfloat<B, E, M, S> r;
    if constexpr (sizeof(From) == 8 && is_float_like<From>::value) r.bits = r.encode(static_cast<double>(x));
    else if constexpr (is_half_like<From>::value) r.bits = r.encode(to_float(x));
    else r.bits = r.encode(static_cast<float>(x));
    return r;
  }
};
// Floats to sub-byte integers truncate toward zero and saturate (NaN: 0), as cvt.rzi does.
template <int N, bool S> struct Convert<subint<N, S>> {
  template <class From> __device__ __forceinline__ static subint<N, S> run(From x) {
    if constexpr (is_float_like<From>::value) {
      float f = is_half_like<From>::value ? to_float(x) : static_cast<float>(x);
      constexpr float lo = S ? -float(1 << (N - 1)) : 0.0f, hi = S ? float((1 << (N - 1)) - 1) : float((1 << N) - 1);
      if (isnan(f)) return subint<N, S>(0);
      return subint<N, S>((long long)truncf(fminf(fmaxf(f, lo), hi)));
    } else {
      return subint<N, S>((long long)x);
    }
  }
};

// Register arrays of sub-byte elements, densely packed: element i is bits [i*Bits, (i+1)*Bits).
template <class T, int Bits, int N> struct packed;
template <class T, int Bits, int N> struct packed_ref {
  packed<T, Bits, N>* p;
  int i;
  __device__ __forceinline__ operator T() const { return p->get(i); }
  __device__ __forceinline__ packed_ref& operator=(T v) {
    p->set(i, v);
    return *this;
  }
  __device__ __forceinline__ packed_ref& operator=(const packed_ref& o) { return *this = T(o); }
};
template <class T, int Bits, int N> struct packed {
  uint32_t w[(N * Bits + 31) / 32];
  __device__ __forceinline__ uint32_t code(int i) const {
    int bit = i * Bits, k = bit / 32, s = bit % 32;
    uint32_t c = w[k] >> s;
    if (s + Bits > 32) c |= w[k + 1] << (32 - s);
    return c & ((1u << Bits) - 1u);
  }
  __device__ __forceinline__ void set_code(int i, uint32_t c) {
    int bit = i * Bits, k = bit / 32, s = bit % 32;
    c &= (1u << Bits) - 1u;
    w[k] = (w[k] & ~(((1u << Bits) - 1u) << s)) | (c << s);
    if (s + Bits > 32) w[k + 1] = (w[k + 1] & ~((1u << (s + Bits - 32)) - 1u)) | (c >> (32 - s));
  }
  __device__ __forceinline__ T get(int i) const { return T::from_code(code(i)); }
  __device__ __forceinline__ void set(int i, T v) { set_code(i, v.code()); }
  __device__ __forceinline__ packed_ref<T, Bits, N> operator[](int i) { return {this, i}; }
  __device__ __forceinline__ T operator[](int i) const { return get(i); }
  // The byte holding element i's first bit (i * Bits a multiple of 8).
  __device__ __forceinline__ uint8_t* ptr(int i) { return reinterpret_cast<uint8_t*>(w) + i * Bits / 8; }
};
template <class Value> __device__ __forceinline__ Value unref(Value v) { return v; }
template <class T, int B, int N> __device__ __forceinline__ T unref(packed_ref<T, B, N> r) { return T(r); }

// Sub-byte elements of packed memory (global or shared), one at a time. A store changes only
// its element's bits, atomically, so threads may write neighbouring elements of one word.
template <int Bits> __device__ __forceinline__ uint32_t load_bits(const void* base, long long index) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(base);
  long long bit = index * Bits;
  uint32_t c = p[bit / 8] >> (bit % 8);
  if (bit % 8 + Bits > 8) c |= uint32_t(p[bit / 8 + 1]) << (8 - bit % 8);
  return c & ((1u << Bits) - 1u);
}
template <int Bits> __device__ __forceinline__ void store_bits(void* base, long long index, uint32_t c) {
  long long bit = index * Bits;
  uint64_t byte = reinterpret_cast<uint64_t>(base) + uint64_t(bit / 8);
  uint32_t* word = reinterpret_cast<uint32_t*>(byte & ~uint64_t(3));
  int s = int(byte & 3u) * 8 + int(bit % 8);  // the element's first bit within *word
  c &= (1u << Bits) - 1u;
  uint64_t mask = uint64_t((1u << Bits) - 1u) << s, value = uint64_t(c) << s;
  atomicAnd(word, ~uint32_t(mask));
  atomicOr(word, uint32_t(value));
  if (s + Bits > 32) {
    atomicAnd(word + 1, ~uint32_t(mask >> 32));
    atomicOr(word + 1, uint32_t(value >> 32));
  }
}

template <class To, class From> __device__ __forceinline__ To cvt(From x) { return Convert<To>::run(unref(x)); }

// ---- vectorized conversions (the Cast instruction's fast paths; each exact) ------------------
// 8 packed 4-bit integers (one word, element i at bits 4i) to 8 halves or bfloat16s. Per pair of
// elements (byte p): one byte permute of the word and of the word shifted by 4 puts element 2p
// in the low half's low nibble and element 2p + 1 in the high half's; one lop3 masks the
// nibbles and puts in the magic exponent (1024 for half, 128 for bfloat16: the nibble becomes
// the low mantissa bits), for signed codes also flipping each nibble's top bit (c ^ 8 = c + 8
// mod 16); one subtraction of that same magic word (1024 + 8 with the flip) leaves the value.
// Three instructions per pair and one shift per word, each step exact. The lop3 is written out:
// the compiler splits `(t & m) ^ k` with two constants into two instructions.
__device__ __forceinline__ uint32_t nibble_pair(uint32_t w, uint32_t w4, int p, uint32_t magic) {
  uint32_t t = __byte_perm(w, w4, (uint32_t(p) | (uint32_t(p) << 4)) | ((uint32_t(p + 4) | (uint32_t(p + 4) << 4)) << 8));
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0x6a;" : "=r"(r) : "r"(t), "n"(0x000f000fu), "r"(magic));  // (t & m) ^ magic
  return r;
}
#ifdef TILUS_DEVICE_FP16
template <bool Signed> __device__ __forceinline__ void cvt_4bit_x8(__half* out, uint32_t w) {
  // The magic word and the number to subtract are the same: half2(1032, 1032) : half2(1024, 1024).
  const uint32_t magic = Signed ? 0x64086408u : 0x64006400u;
  const uint32_t w4 = w >> 4;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    uint32_t t = nibble_pair(w, w4, p, magic);
    reinterpret_cast<__half2*>(out)[p] =
        __hsub2(*reinterpret_cast<__half2*>(&t), *reinterpret_cast<const __half2*>(&magic));
  }
}
// fp8 pairs to half pairs: one cvt per pair on sm_89+ (exact: every fp8 value is a half).
template <bool E4M3> __device__ __forceinline__ void cvt_fp8_x2(__half* out, uint16_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  if (E4M3) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(r) : "h"(v));
  *reinterpret_cast<uint32_t*>(out) = r;
#else
  typedef lowfloat<8, E4M3 ? 4 : 5, E4M3 ? 3 : 2, E4M3 ? 1 : 0> F;
  out[0] = __float2half_rn(F::decode(v & 0xffu));
  out[1] = __float2half_rn(F::decode(v >> 8));
#endif
}
#endif
// e4m3 codes from the hardware cvt with each NaN code (S.1111.111) made 0x7f, the host's rule
// whatever the NaN's sign (the hardware may keep it): a byte whose low 7 bits are all ones
// carries into its bit 7 when 1 is added to them, and that bit clears the sign. Three integer
// instructions a word (four codes), where a compare and select per float cost two a code; the
// last is one lop3 (w & ~(t & 0x80808080)) in asm, which LLVM otherwise rewrites into two.
__device__ __forceinline__ uint32_t e4m3_positive_nans(uint32_t w) {
  uint32_t t = (w & 0x7f7f7f7fu) + 0x01010101u, r;
  asm("lop3.b32 %0, %1, %2, %3, 0x70;" : "=r"(r) : "r"(w), "r"(t), "r"(0x80808080u));
  return r;
}
// Two float32 values to e4m3 (element 0 in the low byte): one cvt on sm_89+, rounding to
// nearest even and saturating to +-448 as the host's encoder does for the FiniteNaN style; a
// NaN's code is 0x7f (e4m3_positive_nans).
__device__ __forceinline__ void cvt_f32x2_e4m3(lowfloat<8, 4, 3, 1>* out, float x0, float x1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(x1), "f"(x0));  // d = {hi: x1, lo: x0}
  uint32_t w = e4m3_positive_nans(r);
  out[0].bits = uint8_t(w & 0xffu);
  out[1].bits = uint8_t(w >> 8);
#else
  out[0].bits = lowfloat<8, 4, 3, 1>::encode(x0);
  out[1].bits = lowfloat<8, 4, 3, 1>::encode(x1);
#endif
}
// Four float32 values to e4m3 as one 32-bit word (element 0 in the low byte; out 4-byte
// aligned): two cvts, one NaN fix-up and one word store, so the codes never pass through bytes.
__device__ __forceinline__ void cvt_f32x4_e4m3(lowfloat<8, 4, 3, 1>* out, float x0, float x1, float x2, float x3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(x1), "f"(x0));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(x3), "f"(x2));
  *reinterpret_cast<uint32_t*>(out) = e4m3_positive_nans(uint32_t(lo) | (uint32_t(hi) << 16));
#else
  cvt_f32x2_e4m3(out, x0, x1);
  cvt_f32x2_e4m3(out + 2, x2, x3);
#endif
}
// Two bfloat16s (one word, element 0 in the low half) to float32: a bfloat16 is the top half of
// its float32, so a shift and a mask, one instruction a value with no extraction of the halves.
__device__ __forceinline__ void cvt_bf16x2_f32(float* out, uint32_t w) {
  out[0] = __uint_as_float(w << 16);
  out[1] = __uint_as_float(w & 0xffff0000u);
}
// 8 packed fp4 e2m1 values (one word, element i at bits 4i; sign, 2 exponent bits, 1 mantissa
// bit, bias 1, no infinities) to 8 halves or bfloat16s. Per pair (one byte) the two nibbles go
// to the low bits of the two halves; the exponent and mantissa bits move to the top of the
// target's exponent field's low bits, the sign to bit 15, and one multiply by 2^(bias - 1)
// (2^14 for half, 2^126 for bfloat16) rebiases: exact for normals and for the subnormal 0.5.
template <int MantissaBits> __device__ __forceinline__ uint32_t fp4_pair_bits(uint32_t w, int p) {
  uint32_t x = __byte_perm(w, 0u, 0x4040u | (uint32_t(p) << 8) | uint32_t(p));  // byte p in bytes 0 and 2
  x = (x & 0x0000000fu) | ((x >> 4) & 0x000f0000u);                             // nibbles in the halves' low bits
  return ((x & 0x00070007u) << (MantissaBits - 1)) | ((x & 0x00080008u) << 12);
}
template <class T> struct Fp4Target;  // per 16-bit float: mantissa bits, the 2^(bias - 1) pair, the pair type
#ifdef TILUS_DEVICE_FP16
template <> struct Fp4Target<__half> {
  static constexpr int mantissa = 10;
  static constexpr uint32_t scale = 0x74007400u;  // half2(2^14, 2^14)
  typedef __half2 pair;
};
#endif
#ifdef TILUS_DEVICE_BF16
template <> struct Fp4Target<__nv_bfloat16> {
  static constexpr int mantissa = 7;
  static constexpr uint32_t scale = 0x7e807e80u;  // bf162(2^126, 2^126)
  typedef __nv_bfloat162 pair;
};
#endif
template <class T> __device__ __forceinline__ void cvt_fp4_x8(T* out, uint32_t w) {
  typedef typename Fp4Target<T>::pair P;
  const uint32_t scale = Fp4Target<T>::scale;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    uint32_t t = fp4_pair_bits<Fp4Target<T>::mantissa>(w, p);
    reinterpret_cast<P*>(out)[p] = __hmul2(*reinterpret_cast<P*>(&t), *reinterpret_cast<const P*>(&scale));
  }
}
#if defined(TILUS_DEVICE_BF16) && defined(TILUS_DEVICE_FP16)
// fp8 pairs to bfloat16 pairs: through a half pair (both exact: every fp8 value is a half and a
// bfloat16).
template <bool E4M3> __device__ __forceinline__ void cvt_fp8_x2(__nv_bfloat16* out, uint16_t v) {
  __half h[2];
  cvt_fp8_x2<E4M3>(h, v);
  *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(__half2float(h[0]), __half2float(h[1]));
}
#endif
#ifdef TILUS_DEVICE_BF16
// bfloat16: the same with the magic number 128 (0x4300; 7 mantissa bits hold the nibble).
template <bool Signed> __device__ __forceinline__ void cvt_4bit_x8(__nv_bfloat16* out, uint32_t w) {
  const uint32_t magic = Signed ? 0x43084308u : 0x43004300u;  // bf162(136, 136) : bf162(128, 128)
  const uint32_t w4 = w >> 4;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    uint32_t t = nibble_pair(w, w4, p, magic);
    reinterpret_cast<__nv_bfloat162*>(out)[p] =
        __hsub2(*reinterpret_cast<__nv_bfloat162*>(&t), *reinterpret_cast<const __nv_bfloat162*>(&magic));
  }
}
#endif

template <class T> __device__ __forceinline__ T inf() { return cvt<T>(__int_as_float(0x7f800000)); }
template <> __device__ __forceinline__ double inf<double>() { return __longlong_as_double(0x7ff0000000000000ll); }
template <class T> __device__ __forceinline__ T nan() { return cvt<T>(__int_as_float(0x7fc00000)); }
template <> __device__ __forceinline__ double nan<double>() { return __longlong_as_double(0x7ff8000000000000ll); }

// ---- scalar math --------------------------------------------------------------------------
template <class T> __device__ __forceinline__ T min_(T a, T b) { return b < a ? b : a; }
template <class T> __device__ __forceinline__ T max_(T a, T b) { return a < b ? b : a; }
__device__ __forceinline__ float min_(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float max_(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double min_(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ double max_(double a, double b) { return fmax(a, b); }
#ifdef TILUS_DEVICE_FP16
__device__ __forceinline__ __half min_(__half a, __half b) { return __hmin(a, b); }
__device__ __forceinline__ __half max_(__half a, __half b) { return __hmax(a, b); }
#endif
#ifdef TILUS_DEVICE_BF16
__device__ __forceinline__ __nv_bfloat16 min_(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmin(a, b); }
__device__ __forceinline__ __nv_bfloat16 max_(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax(a, b); }
#endif

template <class T> __device__ __forceinline__ T floor_div(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <class T> __device__ __forceinline__ T floor_mod(T a, T b) { return a - floor_div(a, b) * b; }
__device__ __forceinline__ float floor_div(float a, float b) { return floorf(a / b); }
__device__ __forceinline__ double floor_div(double a, double b) { return floor(a / b); }
__device__ __forceinline__ float floor_mod(float a, float b) { return a - floorf(a / b) * b; }
__device__ __forceinline__ double floor_mod(double a, double b) { return a - floor(a / b) * b; }
__device__ __forceinline__ float fmod_(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double fmod_(double a, double b) { return fmod(a, b); }

// Transcendentals: float and double directly, 16-bit floats through float.
#ifdef TILUS_DEVICE_FP16
#define TILUS_MATH1_FP16(name, ffn) \
  __device__ __forceinline__ __half name(__half x) { return __float2half_rn(ffn(__half2float(x))); }
#else
#define TILUS_MATH1_FP16(name, ffn)
#endif
#ifdef TILUS_DEVICE_BF16
#define TILUS_MATH1_BF16(name, ffn)                                \
  __device__ __forceinline__ __nv_bfloat16 name(__nv_bfloat16 x) { \
    return __float2bfloat16_rn(ffn(__bfloat162float(x)));          \
  }
#else
#define TILUS_MATH1_BF16(name, ffn)
#endif
// exp2 of a float is the MUFU.EX2 instruction with denormal results flushed to zero (as NVIDIA
// Tilus's -ftz=true and fast-math kernels get it): exp2f keeps results below 2^-126 as denormals
// at the price of a compare and two predicated multiplies per call, which were a quarter of the
// instructions of flash attention's softmax. The CPU backend flushes the same results.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// rcp of a float is the MUFU.RCP instruction (rcp.approx.ftz: within 1 ulp of 1 / x, results
// below 2^-126 flushed to zero, 1 / inf = 0) without the IEEE division's refinement and range
// check; a double's is the division.
__device__ __forceinline__ float rcp_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ double rcp_d(double x) { return 1.0 / x; }
#define TILUS_MATH1(name, ffn, dfn)                                                          \
  __device__ __forceinline__ float name(float x) { return ffn(x); }                          \
  __device__ __forceinline__ double name(double x) { return dfn(x); }                        \
  TILUS_MATH1_FP16(name, ffn)                                                                \
  TILUS_MATH1_BF16(name, ffn)
TILUS_MATH1(exp, expf, ::exp)
TILUS_MATH1(exp2, ex2_ftz, ::exp2)
TILUS_MATH1(log, logf, ::log)
TILUS_MATH1(log2, log2f, ::log2)
TILUS_MATH1(sqrt, sqrtf, ::sqrt)
TILUS_MATH1(rsqrt, rsqrtf, ::rsqrt)
TILUS_MATH1(rcp, rcp_ftz, rcp_d)
TILUS_MATH1(sin, sinf, ::sin)
TILUS_MATH1(cos, cosf, ::cos)
TILUS_MATH1(tanh, tanhf, ::tanh)
TILUS_MATH1(erf, erff, ::erf)
TILUS_MATH1(round, rintf, ::rint)
TILUS_MATH1(floor, floorf, ::floor)
TILUS_MATH1(ceil, ceilf, ::ceil)
TILUS_MATH1(abs, fabsf, ::fabs)
#undef TILUS_MATH1
#undef TILUS_MATH1_FP16
#undef TILUS_MATH1_BF16
__device__ __forceinline__ int32_t abs(int32_t x) { return x < 0 ? -x : x; }
__device__ __forceinline__ int64_t abs(int64_t x) { return x < 0 ? -x : x; }
__device__ __forceinline__ int8_t abs(int8_t x) { return x < 0 ? int8_t(-x) : x; }
__device__ __forceinline__ int16_t abs(int16_t x) { return x < 0 ? int16_t(-x) : x; }
template <class T> __device__ __forceinline__ T abs(T x) { return x; }  // unsigned
__device__ __forceinline__ float pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double pow(double a, double b) { return ::pow(a, b); }

// ---- memory -----------------------------------------------------------------------------------
// Vector loads and stores of N bytes (4, 8, 16) between memory and a register array.
template <int Bytes> struct VecType;
template <> struct VecType<1> { typedef uint8_t type; };
template <> struct VecType<2> { typedef uint16_t type; };
template <> struct VecType<4> { typedef uint32_t type; };
template <> struct VecType<8> { typedef uint2 type; };
template <> struct VecType<16> { typedef uint4 type; };

template <int Bytes, class T> __device__ __forceinline__ void load_vec(T* dst, const void* src) {
  typedef typename VecType<Bytes>::type V;
  *reinterpret_cast<V*>(dst) = *reinterpret_cast<const V*>(src);
}
template <int Bytes, class T> __device__ __forceinline__ void store_vec(void* dst, const T* src) {
  typedef typename VecType<Bytes>::type V;
  *reinterpret_cast<V*>(dst) = *reinterpret_cast<const V*>(src);
}
template <int Bytes, class T> __device__ __forceinline__ void zero_vec(T* dst) {
  typedef typename VecType<Bytes>::type V;
  *reinterpret_cast<V*>(dst) = V();
}

// Global loads and stores of 1-16 bytes with an L2 eviction policy (createpolicy) as the
// cache hint: the SIMT path of copy(eviction_policy=...).
template <int Bytes, class T> __device__ __forceinline__ void load_vec_hint(T* dst, const void* src, uint64_t policy) {
  if constexpr (Bytes == 16) {
    uint4 v;
    asm volatile("ld.global.L2::cache_hint.v4.b32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src), "l"(policy));
    *reinterpret_cast<uint4*>(dst) = v;
  } else if constexpr (Bytes == 8) {
    uint2 v;
    asm volatile("ld.global.L2::cache_hint.v2.b32 {%0, %1}, [%2], %3;\n" : "=r"(v.x), "=r"(v.y) : "l"(src), "l"(policy));
    *reinterpret_cast<uint2*>(dst) = v;
  } else if constexpr (Bytes == 4) {
    uint32_t v;
    asm volatile("ld.global.L2::cache_hint.b32 %0, [%1], %2;\n" : "=r"(v) : "l"(src), "l"(policy));
    *reinterpret_cast<uint32_t*>(dst) = v;
  } else if constexpr (Bytes == 2) {
    uint16_t v;
    asm volatile("ld.global.L2::cache_hint.b16 %0, [%1], %2;\n" : "=h"(v) : "l"(src), "l"(policy));
    *reinterpret_cast<uint16_t*>(dst) = v;
  } else {
    uint32_t v;
    asm volatile("ld.global.L2::cache_hint.u8 %0, [%1], %2;\n" : "=r"(v) : "l"(src), "l"(policy));
    *reinterpret_cast<uint8_t*>(dst) = uint8_t(v);
  }
}
template <int Bytes, class T> __device__ __forceinline__ void store_vec_hint(void* dst, const T* src, uint64_t policy) {
  if constexpr (Bytes == 16) {
    uint4 v = *reinterpret_cast<const uint4*>(src);
    asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(dst), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w), "l"(policy)
                 : "memory");
  } else if constexpr (Bytes == 8) {
    uint2 v = *reinterpret_cast<const uint2*>(src);
    asm volatile("st.global.L2::cache_hint.v2.b32 [%0], {%1, %2}, %3;\n" ::"l"(dst), "r"(v.x), "r"(v.y), "l"(policy)
                 : "memory");
  } else if constexpr (Bytes == 4) {
    uint32_t v = *reinterpret_cast<const uint32_t*>(src);
    asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;\n" ::"l"(dst), "r"(v), "l"(policy) : "memory");
  } else if constexpr (Bytes == 2) {
    uint16_t v = *reinterpret_cast<const uint16_t*>(src);
    asm volatile("st.global.L2::cache_hint.b16 [%0], %1, %2;\n" ::"l"(dst), "h"(v), "l"(policy) : "memory");
  } else {
    uint32_t v = *reinterpret_cast<const uint8_t*>(src);
    asm volatile("st.global.L2::cache_hint.u8 [%0], %1, %2;\n" ::"l"(dst), "r"(v), "l"(policy) : "memory");
  }
}

// A store's lane exchange (select_instructions' LaneExchange): word `i` of the 32-bit words at `p`,
// and the transpose of the K x K words w[j] of the K lanes whose lane index differs in the
// multiples of Stride: afterwards w[p] of lane digit q holds what w[q] of lane digit p held
// (log2 K rounds of K / 2 shuffles, each swapping one bit of the lane with one of the index).
template <class T> __device__ __forceinline__ uint32_t word32(const T* p, int i) {
  return reinterpret_cast<const uint32_t*>(p)[i];
}
template <class T> __device__ __forceinline__ void set_word32(T* p, int i, uint32_t v) {
  reinterpret_cast<uint32_t*>(p)[i] = v;
}
template <int K, int Stride> __device__ __forceinline__ void transpose_lanes(uint32_t (&w)[K]) {
  const unsigned lane = threadIdx.x % 32u;
#pragma unroll
  for (int bit = 1; bit < K; bit <<= 1) {
    const bool high = (lane / Stride) & bit;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if (j & bit) continue;
      uint32_t got = __shfl_xor_sync(0xffffffffu, high ? w[j] : w[j | bit], bit * Stride);
      if (high) w[j] = got;
      else w[j | bit] = got;
    }
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A 16-, 32- or 64-bit value's bits as the unsigned integer inline PTX takes, and back (atomics).
template <int Bytes> struct RawOf;
template <> struct RawOf<2> { typedef unsigned short type; };
template <> struct RawOf<4> { typedef unsigned int type; };
template <> struct RawOf<8> { typedef unsigned long long type; };
template <class T> __device__ __forceinline__ typename RawOf<sizeof(T)>::type raw_bits(T x) {
  typename RawOf<sizeof(T)>::type u;
  memcpy(&u, &x, sizeof(T));
  return u;
}
template <class T, class U> __device__ __forceinline__ T from_raw(U u) {
  T x;
  memcpy(&x, &u, sizeof(T));
  return x;
}

// cp.async of Bytes (4, 8 or 16) with zero fill: its first src_bytes (0 to Bytes) are read, the
// rest of the vector is zero-filled (cp_async: all or, pred false, none). The _hint forms pass the
// L2 eviction policy (createpolicy) as a cache hint.
template <int Bytes> __device__ __forceinline__ void cp_async_n(void* smem, const void* gmem, int src_bytes) {
  uint32_t s = smem_addr(smem);
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(gmem), "n"(Bytes), "r"(src_bytes)
                 : "memory");
  }
}
template <int Bytes> __device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool pred) {
  cp_async_n<Bytes>(smem, gmem, pred ? Bytes : 0);
}
template <int Bytes>
__device__ __forceinline__ void cp_async_n_hint(void* smem, const void* gmem, int src_bytes, uint64_t policy) {
  uint32_t s = smem_addr(smem);
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes), "l"(policy)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], %2, %3, %4;\n" ::"r"(s), "l"(gmem), "n"(Bytes),
                 "r"(src_bytes), "l"(policy)
                 : "memory");
  }
}
template <int Bytes>
__device__ __forceinline__ void cp_async_hint(void* smem, const void* gmem, bool pred, uint64_t policy) {
  cp_async_n_hint<Bytes>(smem, gmem, pred ? Bytes : 0, policy);
}
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Barrier of a thread group: the whole block, a named barrier of a multiple of 32 threads,
// or a warp mask for groups inside one warp.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The signal half: the calling threads count towards barrier `id` and go on.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- warp shuffles --------------------------------------------------------------------------------
template <class T> __device__ __forceinline__ T shfl_xor(T v, int lane_mask, unsigned mask = 0xffffffffu) {
  return __shfl_xor_sync(mask, v, lane_mask);
}
template <> __device__ __forceinline__ bool shfl_xor<bool>(bool v, int lane_mask, unsigned mask) {
  return __shfl_xor_sync(mask, int(v), lane_mask) != 0;
}

// ---- thread-level builtins (seed 004) ----------------------------------------------------------------
// Shuffles of any 8- to 64-bit value: moved as its bits in 32-bit registers (64-bit values as two).
__device__ __forceinline__ uint32_t shfl_in(bool v) { return v ? 1u : 0u; }
__device__ __forceinline__ uint32_t shfl_in(int8_t v) { return uint8_t(v); }
__device__ __forceinline__ uint32_t shfl_in(uint8_t v) { return v; }
__device__ __forceinline__ uint32_t shfl_in(int16_t v) { return uint16_t(v); }
__device__ __forceinline__ uint32_t shfl_in(uint16_t v) { return v; }
__device__ __forceinline__ uint32_t shfl_in(int32_t v) { return uint32_t(v); }
__device__ __forceinline__ uint32_t shfl_in(uint32_t v) { return v; }
#ifdef TILUS_DEVICE_FP16
__device__ __forceinline__ uint32_t shfl_in(__half v) { return __half_as_ushort(v); }
#endif
#ifdef TILUS_DEVICE_BF16
__device__ __forceinline__ uint32_t shfl_in(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
#endif
__device__ __forceinline__ uint32_t shfl_in(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint64_t shfl_in(int64_t v) { return uint64_t(v); }
__device__ __forceinline__ uint64_t shfl_in(uint64_t v) { return v; }
__device__ __forceinline__ uint64_t shfl_in(double v) { return uint64_t(__double_as_longlong(v)); }
template <class T> struct ShflOut { static __device__ __forceinline__ T run(uint64_t w) { return T(w); } };
template <> struct ShflOut<bool> { static __device__ __forceinline__ bool run(uint64_t w) { return w != 0; } };
#ifdef TILUS_DEVICE_FP16
template <> struct ShflOut<__half> {
  static __device__ __forceinline__ __half run(uint64_t w) { return __ushort_as_half(uint16_t(w)); }
};
#endif
#ifdef TILUS_DEVICE_BF16
template <> struct ShflOut<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 run(uint64_t w) { return __ushort_as_bfloat16(uint16_t(w)); }
};
#endif
template <> struct ShflOut<float> { static __device__ __forceinline__ float run(uint64_t w) { return __uint_as_float(uint32_t(w)); } };
template <> struct ShflOut<double> {
  static __device__ __forceinline__ double run(uint64_t w) { return __longlong_as_double((long long)w); }
};
#define TILUS_SHUFFLE(name, intrinsic)                                                              \
  template <class T> __device__ __forceinline__ T name(unsigned mask, T v, int b, int width) {      \
    auto w = shfl_in(v);                                                                            \
    if constexpr (sizeof(w) == 8) {                                                                 \
      uint32_t lo = intrinsic(mask, uint32_t(w), b, width), hi = intrinsic(mask, uint32_t(w >> 32), b, width); \
      return ShflOut<T>::run((uint64_t(hi) << 32) | lo);                                           \
    } else {                                                                                        \
      return ShflOut<T>::run(intrinsic(mask, w, b, width));                                         \
    }                                                                                               \
  }
TILUS_SHUFFLE(shfl_xor_sync, __shfl_xor_sync)
TILUS_SHUFFLE(shfl_down_sync, __shfl_down_sync)
TILUS_SHUFFLE(shfl_up_sync, __shfl_up_sync)
TILUS_SHUFFLE(shfl_idx_sync, __shfl_sync)
#undef TILUS_SHUFFLE

// setmaxnreg (sm_90a): the warp group's per-thread register budget.
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// The block's index, read once at the kernel's start (the emitter's tilus_block_x, ...). A
// volatile read stays where it is: the optimizer re-reads blockIdx where it is used, and such a
// read inside a loop of wgmma made ptxas serialize them (its remark C7515, in conv2d_wgmma).
#define TILUS_SREG_XYZ(fn, sreg)                                                   \
  __device__ __forceinline__ int32_t fn(int dim) {                                 \
    uint32_t r;                                                                    \
    if (dim == 0) asm volatile("mov.u32 %0, %%" sreg ".x;\n" : "=r"(r));          \
    else if (dim == 1) asm volatile("mov.u32 %0, %%" sreg ".y;\n" : "=r"(r));     \
    else asm volatile("mov.u32 %0, %%" sreg ".z;\n" : "=r"(r));                   \
    return int32_t(r);                                                             \
  }
TILUS_SREG_XYZ(block_idx, "ctaid")

// Thread-block clusters (sm_90): the block's place in its cluster, and the cluster barrier.
TILUS_SREG_XYZ(cluster_ctaid, "cluster_ctaid")
#undef TILUS_SREG_XYZ
__device__ __forceinline__ int32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return int32_t(r);
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive;\nbarrier.cluster.wait;\n" ::: "memory");
}

// sync_grid: the barrier of every block of a cooperative launch. The driver gives such a launch a
// workspace (its address: %envreg1 high, %envreg2 low bits) whose second 32-bit word counts
// arrivals: block (0, 0, 0) adds 2^31 - (blocks - 1), every other block 1, so the top bit flips
// when the last block arrives, whatever the count held before.
// lock_semaphore's spin (one thread): acquire loads at GPU scope until *semaphore == value.
__device__ __forceinline__ void semaphore_wait(const int32_t* semaphore, int32_t value) {
  int32_t now;
  do {
    asm volatile("ld.acquire.gpu.b32 %0, [%1];\n" : "=r"(now) : "l"(semaphore) : "memory");
  } while (now != value);
}
// release_semaphore's store (one thread, after the group's barrier).
__device__ __forceinline__ void semaphore_release(int32_t* semaphore, int32_t value) {
  asm volatile("st.release.gpu.b32 [%0], %1;\n" : : "l"(semaphore), "r"(value) : "memory");
}

__device__ __forceinline__ void grid_sync() {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t hi, lo;
    asm volatile("mov.u32 %0, %%envreg1;\n" : "=r"(hi));
    asm volatile("mov.u32 %0, %%envreg2;\n" : "=r"(lo));
    uint32_t* arrived = reinterpret_cast<uint32_t*>((uint64_t(hi) << 32) | lo) + 1;
    uint32_t blocks = gridDim.x * gridDim.y * gridDim.z;
    uint32_t add = (blockIdx.x | blockIdx.y | blockIdx.z) == 0 ? 0x80000000u - (blocks - 1) : 1u;
    uint32_t before, now;
    asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;\n" : "=r"(before) : "l"(arrived), "r"(add) : "memory");
    do {
      asm volatile("ld.acquire.gpu.u32 %0, [%1];\n" : "=r"(now) : "l"(arrived) : "memory");
    } while (((before ^ now) & 0x80000000u) == 0);
  }
  __syncthreads();
}

// ldg / stg: one thread's Bytes-byte vector (4, 8, 16 or 32: two 16-byte accesses) through
// explicit PTX; `pred` false loads zeros / skips the store. The register side is 16-byte aligned.
template <int Bytes, class T> __device__ __forceinline__ void ldg(T* dst, const void* src, bool pred) {
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  if (!pred) {
#pragma unroll
    for (int i = 0; i < Bytes / 4; ++i) d[i] = 0;
    return;
  }
  if constexpr (Bytes == 4) {
    asm volatile("ld.global.u32 %0, [%1];\n" : "=r"(d[0]) : "l"(src) : "memory");
  } else if constexpr (Bytes == 8) {
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];\n" : "=r"(d[0]), "=r"(d[1]) : "l"(src) : "memory");
  } else {
    static_assert(Bytes == 16 || Bytes == 32, "ldg moves 4, 8, 16 or 32 bytes");
#pragma unroll
    for (int k = 0; k < Bytes / 16; ++k)
      asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(d[4 * k]), "=r"(d[4 * k + 1]), "=r"(d[4 * k + 2]), "=r"(d[4 * k + 3])
                   : "l"(static_cast<const char*>(src) + 16 * k)
                   : "memory");
  }
}
template <int Bytes, class T> __device__ __forceinline__ void stg(void* dst, const T* src, bool pred) {
  if (!pred) return;
  const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
  if constexpr (Bytes == 4) {
    asm volatile("st.global.u32 [%0], %1;\n" ::"l"(dst), "r"(s[0]) : "memory");
  } else if constexpr (Bytes == 8) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};\n" ::"l"(dst), "r"(s[0]), "r"(s[1]) : "memory");
  } else {
    static_assert(Bytes == 16 || Bytes == 32, "stg moves 4, 8, 16 or 32 bytes");
#pragma unroll
    for (int k = 0; k < Bytes / 16; ++k)
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(static_cast<char*>(dst) + 16 * k),
                   "r"(s[4 * k]), "r"(s[4 * k + 1]), "r"(s[4 * k + 2]), "r"(s[4 * k + 3])
                   : "memory");
  }
}

// ---- tensor cores ------------------------------------------------------------------------------------
#ifdef TILUS_DEVICE_FP16
__device__ __forceinline__ uint32_t pack2(__half lo, __half hi) {
  return uint32_t(__half_as_ushort(lo)) | (uint32_t(__half_as_ushort(hi)) << 16);
}
#endif
#ifdef TILUS_DEVICE_BF16
__device__ __forceinline__ uint32_t pack2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return uint32_t(__bfloat16_as_ushort(lo)) | (uint32_t(__bfloat16_as_ushort(hi)) << 16);
}
#endif

// ldmatrix: each lane gives the shared address of one 16-byte row; the warp receives 8x8
// matrices of 16-bit elements in the mma fragment order (.trans: transposed). N is 1, 2 or 4
// matrices; dst gets 2 * N elements.
template <class T> __device__ __forceinline__ T from_bits16(uint16_t b) { return static_cast<T>(b); }
#ifdef TILUS_DEVICE_FP16
template <> __device__ __forceinline__ __half from_bits16<__half>(uint16_t b) { return __ushort_as_half(b); }
#endif
#ifdef TILUS_DEVICE_BF16
template <> __device__ __forceinline__ __nv_bfloat16 from_bits16<__nv_bfloat16>(uint16_t b) {
  return __ushort_as_bfloat16(b);
}
#endif
template <int N, bool Trans, class T> __device__ __forceinline__ void ldmatrix(T* dst, const void* row) {
  static_assert(sizeof(T) == 2, "ldmatrix moves 16-bit elements");
  uint32_t r[N];
  uint32_t a = smem_addr(row);
  if constexpr (N == 4 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else if constexpr (N == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else if constexpr (N == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
#pragma unroll
  for (int i = 0; i < N; ++i) {
    dst[2 * i] = from_bits16<T>(uint16_t(r[i] & 0xffff));
    dst[2 * i + 1] = from_bits16<T>(uint16_t(r[i] >> 16));
  }
}

// stmatrix (sm_90): the inverse of ldmatrix; src holds 2 * N elements in fragment order.
template <class T> __device__ __forceinline__ uint16_t to_bits16(T v) { return static_cast<uint16_t>(v); }
#ifdef TILUS_DEVICE_FP16
template <> __device__ __forceinline__ uint16_t to_bits16<__half>(__half v) { return __half_as_ushort(v); }
#endif
#ifdef TILUS_DEVICE_BF16
template <> __device__ __forceinline__ uint16_t to_bits16<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
#endif
template <int N, bool Trans, class T> __device__ __forceinline__ void stmatrix(void* row, const T* src) {
  static_assert(sizeof(T) == 2, "stmatrix moves 16-bit elements");
  uint32_t r[N];
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = uint32_t(to_bits16<T>(src[2 * i])) | (uint32_t(to_bits16<T>(src[2 * i + 1])) << 16);
  uint32_t a = smem_addr(row);
  if constexpr (N == 4 && Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  else if constexpr (N == 4)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3]) : "memory");
  else if constexpr (N == 2 && Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(a), "r"(r[0]), "r"(r[1])
                 : "memory");
  else if constexpr (N == 2)
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n" ::"r"(a), "r"(r[0]), "r"(r[1]) : "memory");
  else if constexpr (Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};\n" ::"r"(a), "r"(r[0]) : "memory");
  else
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n" ::"r"(a), "r"(r[0]) : "memory");
}

// d += a @ b for one m16n8k16 tile; a: 8 halves, b: 4 halves, d: 4 floats (PTX fragment order).
template <class In> __device__ __forceinline__ void mma_m16n8k16_f32(float* d, const In* a, const In* b);
#ifdef TILUS_DEVICE_FP16
template <> __device__ __forceinline__ void mma_m16n8k16_f32<__half>(float* d, const __half* a, const __half* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(pack2(a[0], a[1])), "r"(pack2(a[2], a[3])), "r"(pack2(a[4], a[5])), "r"(pack2(a[6], a[7])),
        "r"(pack2(b[0], b[1])), "r"(pack2(b[2], b[3])));
}
#endif
#ifdef TILUS_DEVICE_BF16
template <> __device__ __forceinline__ void mma_m16n8k16_f32<__nv_bfloat16>(float* d, const __nv_bfloat16* a,
                                                                            const __nv_bfloat16* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(pack2(a[0], a[1])), "r"(pack2(a[2], a[3])), "r"(pack2(a[4], a[5])), "r"(pack2(a[6], a[7])),
        "r"(pack2(b[0], b[1])), "r"(pack2(b[2], b[3])));
}
#endif
#ifdef TILUS_DEVICE_FP16
// f16 accumulation: d holds 4 halves.
__device__ __forceinline__ void mma_m16n8k16_f16(__half* d, const __half* a, const __half* b) {
  uint32_t d0 = pack2(d[0], d[1]), d1 = pack2(d[2], d[3]);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
      : "+r"(d0), "+r"(d1)
      : "r"(pack2(a[0], a[1])), "r"(pack2(a[2], a[3])), "r"(pack2(a[4], a[5])), "r"(pack2(a[6], a[7])),
        "r"(pack2(b[0], b[1])), "r"(pack2(b[2], b[3])));
  d[0] = __ushort_as_half(uint16_t(d0 & 0xffff));
  d[1] = __ushort_as_half(uint16_t(d0 >> 16));
  d[2] = __ushort_as_half(uint16_t(d1 & 0xffff));
  d[3] = __ushort_as_half(uint16_t(d1 >> 16));
}
#endif

// ---- mbarriers, TMA and proxy fences (sm_90; mbarriers from sm_80) ----------------------------

// A CUtensorMap, as the driver encodes it: passed by value as a __grid_constant__ parameter.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialized barriers visible to the async proxy (TMA) and the cluster.
__device__ __forceinline__ void fence_mbarrier_init() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

template <bool Relaxed, bool Cluster>
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar, uint32_t count) {
#if __CUDA_ARCH__ >= 900
  if constexpr (Relaxed && Cluster)
    asm volatile("mbarrier.arrive.relaxed.cluster.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
  else if constexpr (Relaxed)
    asm volatile("mbarrier.arrive.relaxed.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
  else if constexpr (Cluster)
    asm volatile("mbarrier.arrive.release.cluster.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
  else
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t state;
    asm volatile("mbarrier.arrive.shared.b64 %0, [%1];\n" : "=l"(state) : "r"(bar) : "memory");
  }
#endif
}

// Arrives once on `bar` when every cp.async this thread issued before has landed; .noinc: the
// arrival counts toward the barrier's expected count (cp_async_barrier_noinc).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Arrives on the barrier at the same offset in block `cta` of the cluster; Cluster: with
// release semantics at cluster scope (this thread's earlier writes become visible to the peer's
// waiters), else at the default (CTA) scope, which orders nothing across blocks and costs less.
template <bool Cluster>
__device__ __forceinline__ void mbarrier_arrive_remote(uint32_t bar, uint32_t cta, uint32_t count) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(cta));
  if constexpr (Cluster)
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0], %1;\n" ::"r"(remote), "r"(count) : "memory");
  else
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0], %1;\n" ::"r"(remote), "r"(count) : "memory");
}

// Arrives on the barrier at the same offset in block `cta` of the cluster, adding `bytes` to
// the transaction bytes its phase waits for (release at cluster or, !Cluster, block scope).
template <bool Cluster>
__device__ __forceinline__ void mbarrier_arrive_expect_tx_remote(uint32_t bar, uint32_t cta, uint32_t bytes) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(cta));
  if constexpr (Cluster)
    asm volatile("mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%0], %1;\n" ::"r"(remote), "r"(bytes)
                 : "memory");
  else
    asm volatile("mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%0], %1;\n" ::"r"(remote), "r"(bytes) : "memory");
}

template <bool Relaxed, bool Cluster>
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  if constexpr (Relaxed && Cluster)
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
  else if constexpr (Relaxed)
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
  else if constexpr (Cluster)
    asm volatile("mbarrier.arrive.expect_tx.release.cluster.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
  else
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

template <bool Cluster>
__device__ __forceinline__ void mbarrier_expect_tx(uint32_t bar, uint32_t bytes) {
  if constexpr (Cluster)
    asm volatile("mbarrier.expect_tx.relaxed.cluster.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
  else
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits until the phase of parity `parity` has completed.
template <bool Relaxed, bool Cluster>
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
  if constexpr (Relaxed && Cluster)
    asm volatile(
        "{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.relaxed.cluster.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
  else if constexpr (Relaxed)
    asm volatile(
        "{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.relaxed.cta.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
  else if constexpr (Cluster)
    asm volatile(
        "{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
  else
    asm volatile(
        "{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
#else
  asm volatile(
      "{\n .reg .pred p;\n WAIT:\n mbarrier.test_wait.parity.shared.b64 p, [%0], %1;\n"
      " @!p bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
#endif
}

// One TMA box between global memory (through `map`, at coordinates c, innermost first) and
// shared memory at `smem`; loads complete `bar`'s transaction bytes.
template <int N>
__device__ __forceinline__ void tma_load(uint32_t smem, const TensorMap* map, uint32_t bar, const int32_t (&c)[N]) {
  uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (N == 1)
    asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]) : "memory");
  else if constexpr (N == 2)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]) : "memory");
  else if constexpr (N == 3)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]) : "memory");
  else if constexpr (N == 4)
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]) : "memory");
}

// TMA's im2col mode on an NHWC map: the pixels of the walk that starts at c = {channel, w, h, n}
// (innermost first), each shifted by the kernel offset (off_w, off_h), completing `bar`'s
// transaction bytes (c2d_im2col).
__device__ __forceinline__ void tma_load_im2col(uint32_t smem, const TensorMap* map, uint32_t bar, const int32_t (&c)[4],
                                                uint16_t off_w, uint16_t off_h) {
  uint64_t m = reinterpret_cast<uint64_t>(map);
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], "
               "[%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n"
               ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "h"(off_w), "h"(off_h)
               : "memory");
}
__device__ __forceinline__ void tma_load_im2col(uint32_t smem, const TensorMap* map, uint32_t bar, const int32_t (&c)[4],
                                                uint16_t off_w, uint16_t off_h, uint64_t policy) {
  uint64_t m = reinterpret_cast<uint64_t>(map);
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
               "[%1, {%3, %4, %5, %6}], [%2], {%7, %8}, %9;\n"
               ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "h"(off_w), "h"(off_h),
               "l"(policy)
               : "memory");
}

// tma_load into the shared memory of every block of the cluster in `mask` (bit i: rank i), at
// the same offset, completing on each one's barrier at `bar`'s offset.
template <int N>
__device__ __forceinline__ void tma_load_multicast(uint32_t smem, const TensorMap* map, uint32_t bar,
                                                   const int32_t (&c)[N], uint16_t mask) {
  uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (N == 1)
    asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%4}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask), "r"(c[0]) : "memory");
  else if constexpr (N == 2)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%4, %5}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask), "r"(c[0]), "r"(c[1])
                 : "memory");
  else if constexpr (N == 3)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%4, %5, %6}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask), "r"(c[0]),
                 "r"(c[1]), "r"(c[2]) : "memory");
  else if constexpr (N == 4)
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%4, %5, %6, %7}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask), "r"(c[0]),
                 "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%4, %5, %6, %7, %8}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask), "r"(c[0]),
                 "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]) : "memory");
}

template <int N>
__device__ __forceinline__ void tma_store(const TensorMap* map, uint32_t smem, const int32_t (&c)[N]) {
  uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (N == 1)
    asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];\n" ::"l"(m), "r"(smem), "r"(c[0]) : "memory");
  else if constexpr (N == 2)
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(m), "r"(smem), "r"(c[0]), "r"(c[1]) : "memory");
  else if constexpr (N == 3)
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(m), "r"(smem), "r"(c[0]), "r"(c[1]), "r"(c[2]) : "memory");
  else if constexpr (N == 4)
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(m), "r"(smem), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(m), "r"(smem), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]) : "memory");
}

// The same three with an L2 cache policy (tilus::policy_evict_first / _last: a copy's
// eviction_policy), the PTX `.L2::cache_hint` forms.
template <int N>
__device__ __forceinline__ void tma_load(uint32_t smem, const TensorMap* map, uint32_t bar, const int32_t (&c)[N],
                                         uint64_t policy) {
  uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (N == 1)
    asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%4}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "l"(policy), "r"(c[0])
                 : "memory");
  else if constexpr (N == 2)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%4, %5}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "l"(policy), "r"(c[0]), "r"(c[1])
                 : "memory");
  else if constexpr (N == 3)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%4, %5, %6}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2])
                 : "memory");
  else if constexpr (N == 4)
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%4, %5, %6, %7}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3])
                 : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%4, %5, %6, %7, %8}], [%2], %3;\n" ::"r"(smem), "l"(m), "r"(bar), "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
                 : "memory");
}

template <int N>
__device__ __forceinline__ void tma_load_multicast(uint32_t smem, const TensorMap* map, uint32_t bar,
                                                   const int32_t (&c)[N], uint16_t mask, uint64_t policy) {
  uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (N == 1)
    asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 ".L2::cache_hint [%0], [%1, {%5}], [%2], %3, %4;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask),
                 "l"(policy), "r"(c[0]) : "memory");
  else if constexpr (N == 2)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 ".L2::cache_hint [%0], [%1, {%5, %6}], [%2], %3, %4;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask),
                 "l"(policy), "r"(c[0]), "r"(c[1]) : "memory");
  else if constexpr (N == 3)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 ".L2::cache_hint [%0], [%1, {%5, %6, %7}], [%2], %3, %4;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask),
                 "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2]) : "memory");
  else if constexpr (N == 4)
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 ".L2::cache_hint [%0], [%1, {%5, %6, %7, %8}], [%2], %3, %4;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask),
                 "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 ".L2::cache_hint [%0], [%1, {%5, %6, %7, %8, %9}], [%2], %3, %4;\n" ::"r"(smem), "l"(m), "r"(bar), "h"(mask),
                 "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]) : "memory");
}

template <int N>
__device__ __forceinline__ void tma_store(const TensorMap* map, uint32_t smem, const int32_t (&c)[N], uint64_t policy) {
  uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (N == 1)
    asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%3}], [%1], %2;\n"
                 ::"l"(m), "r"(smem), "l"(policy), "r"(c[0]) : "memory");
  else if constexpr (N == 2)
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%3, %4}], [%1], %2;\n"
                 ::"l"(m), "r"(smem), "l"(policy), "r"(c[0]), "r"(c[1]) : "memory");
  else if constexpr (N == 3)
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%3, %4, %5}], [%1], %2;\n"
                 ::"l"(m), "r"(smem), "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2]) : "memory");
  else if constexpr (N == 4)
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%3, %4, %5, %6}], [%1], %2;\n"
                 ::"l"(m), "r"(smem), "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%3, %4, %5, %6, %7}], [%1], %2;\n"
                 ::"l"(m), "r"(smem), "l"(policy), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]) : "memory");
}

__device__ __forceinline__ void tma_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

template <int N, bool Read> __device__ __forceinline__ void tma_wait_group() {
  if constexpr (Read) asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  else asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// --- wgmma (sm_90a) ----------------------------------------------------------------------
// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading
// and stride byte offsets in 16-byte units, swizzle mode in bits 62-63.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem, uint32_t lbo, uint32_t sbo, uint32_t swizzle) {
  return uint64_t((smem & 0x3FFFFu) >> 4) | (uint64_t((lbo >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFFu) << 32) | (uint64_t(swizzle) << 62);
}
// x, opaque to NVVM (an empty asm): what is computed from it is not reassociated or hoisted.
__device__ __forceinline__ uint64_t opaque_u64(uint64_t x) {
  asm("" : "+l"(x));
  return x;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// The wait after the work placed before it: ptxas schedules a wgmma.wait_group as early as its
// operands allow, but not across a memory fence (order_wgmma_waits).
template <int N> __device__ __forceinline__ void wgmma_wait_group_ordered() {
  asm volatile("fence.acq_rel.cta;\nwgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ties the accumulator registers to this point: no read moves above it (warpgroup_fence_operand).
template <int N> __device__ __forceinline__ void wgmma_fence_operand(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void wgmma_fence_operand(uint32_t* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// --- tcgen05: tensor memory and Blackwell's tensor cores (sm_100a / sm_103a) ------------------------
// A tensor-memory address is (lane << 16) | column, columns of 32 bits.
// A shared-memory matrix descriptor (PTX ISA, "Shared memory descriptor" of tcgen05): start
// address, leading and stride byte offsets in 16-byte units, the fixed 0b001 at bits 46-48, the
// swizzle mode in bits 61-63 (2: 128-byte, 4: 64-byte, 6: 32-byte).
__device__ __forceinline__ uint64_t tcgen05_desc(uint32_t smem, uint32_t lbo, uint32_t sbo, uint32_t swizzle) {
  return uint64_t((smem & 0x3FFFFu) >> 4) | (uint64_t((lbo >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 46) | (uint64_t(swizzle) << 61);
}
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    (defined(__CUDA_ARCH_SPECIFIC__) && (__CUDA_ARCH_SPECIFIC__ == 1000 || __CUDA_ARCH_SPECIFIC__ == 1030))
#define TILUS_TCGEN05 1
#endif
#ifdef TILUS_TCGEN05
// The warp allocates `columns` (a power of two from 32 to 512) and writes the address to `slot`.
template <int CtaGroup> __device__ __forceinline__ void tcgen05_alloc(uint32_t slot, uint32_t columns) {
  asm volatile("tcgen05.alloc.cta_group::%2.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(slot), "r"(columns),
               "n"(CtaGroup) : "memory");
}
template <int CtaGroup> __device__ __forceinline__ void tcgen05_dealloc(uint32_t taddr, uint32_t columns) {
  asm volatile("tcgen05.dealloc.cta_group::%2.sync.aligned.b32 %0, %1;\n" ::"r"(taddr), "r"(columns), "n"(CtaGroup)
               : "memory");
}
template <int CtaGroup> __device__ __forceinline__ void tcgen05_relinquish_alloc_permit() {
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::%0.sync.aligned;\n" ::"n"(CtaGroup) : "memory");
}
// Orders tcgen05 operations around a barrier of threads.
__device__ __forceinline__ void tcgen05_fence_before_thread_sync() {
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
}
__device__ __forceinline__ void tcgen05_fence_after_thread_sync() {
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
}
// d (+)= a @ b: a and b through shared-memory descriptors (SS) or a in tensor memory (TS); the
// accumulation into d where `accumulate`.
template <int CtaGroup, int Kind>  // Kind: 0 f16, 1 tf32, 2 f8f6f4
__device__ __forceinline__ void tcgen05_mma_ss(uint32_t d, uint64_t a, uint64_t b, uint32_t idesc, bool accumulate) {
  uint32_t acc = accumulate ? 1u : 0u;
  if constexpr (Kind == 0)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\ntcgen05.mma.cta_group::%5.kind::f16 [%0], %1, %2, %3, p;\n}\n"
                 ::"r"(d), "l"(a), "l"(b), "r"(idesc), "r"(acc), "n"(CtaGroup) : "memory");
  else if constexpr (Kind == 1)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\ntcgen05.mma.cta_group::%5.kind::tf32 [%0], %1, %2, %3, p;\n}\n"
                 ::"r"(d), "l"(a), "l"(b), "r"(idesc), "r"(acc), "n"(CtaGroup) : "memory");
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\ntcgen05.mma.cta_group::%5.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n"
                 ::"r"(d), "l"(a), "l"(b), "r"(idesc), "r"(acc), "n"(CtaGroup) : "memory");
}
template <int CtaGroup, int Kind>
__device__ __forceinline__ void tcgen05_mma_ts(uint32_t d, uint32_t a, uint64_t b, uint32_t idesc, bool accumulate) {
  uint32_t acc = accumulate ? 1u : 0u;
  if constexpr (Kind == 0)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\ntcgen05.mma.cta_group::%5.kind::f16 [%0], [%1], %2, %3, p;\n}\n"
                 ::"r"(d), "r"(a), "l"(b), "r"(idesc), "r"(acc), "n"(CtaGroup) : "memory");
  else if constexpr (Kind == 1)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\ntcgen05.mma.cta_group::%5.kind::tf32 [%0], [%1], %2, %3, p;\n}\n"
                 ::"r"(d), "r"(a), "l"(b), "r"(idesc), "r"(acc), "n"(CtaGroup) : "memory");
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\ntcgen05.mma.cta_group::%5.kind::f8f6f4 [%0], [%1], %2, %3, p;\n}\n"
                 ::"r"(d), "r"(a), "l"(b), "r"(idesc), "r"(acc), "n"(CtaGroup) : "memory");
}
// Arrives once on `bar` when this thread's earlier tcgen05.mma / cp have completed; multicast: on
// the barrier at `bar`'s offset in every block of the cluster in `mask`.
template <int CtaGroup> __device__ __forceinline__ void tcgen05_commit(uint32_t bar) {
  asm volatile("tcgen05.commit.cta_group::%1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(bar),
               "n"(CtaGroup) : "memory");
}
template <int CtaGroup> __device__ __forceinline__ void tcgen05_commit_multicast(uint32_t bar, uint16_t mask) {
  asm volatile("tcgen05.commit.cta_group::%2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;\n"
               ::"r"(bar), "h"(mask), "n"(CtaGroup) : "memory");
}
// 128 lanes x 256 bits from the shared matrix `desc` into tensor memory at `taddr`.
template <int CtaGroup> __device__ __forceinline__ void tcgen05_cp_128x256b(uint32_t taddr, uint64_t desc) {
  asm volatile("tcgen05.cp.cta_group::%2.128x256b [%0], %1;\n" ::"r"(taddr), "l"(desc), "n"(CtaGroup) : "memory");
}
__device__ __forceinline__ void tcgen05_wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void tcgen05_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;\n" ::: "memory"); }
#endif

// TMA load of one block of a pair (cta_group::2): the bytes complete on `bar`, a shared::cluster
// address (the pair's barrier, possibly the peer's: mapa).
template <int N>
__device__ __forceinline__ void tma_load_cta_pair(uint32_t smem, const TensorMap* map, uint32_t bar, const int32_t (&c)[N]) {
#ifdef TILUS_TCGEN05
  uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (N == 1)
    asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [%0], [%1, {%3}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]) : "memory");
  else if constexpr (N == 2)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [%0], [%1, {%3, %4}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]) : "memory");
  else if constexpr (N == 3)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [%0], [%1, {%3, %4, %5}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]) : "memory");
  else if constexpr (N == 4)
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n"
                 ::"r"(smem), "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]) : "memory");
#endif
}
// The shared::cluster address of the barrier at `bar`'s offset in block `cta` of the cluster.
__device__ __forceinline__ uint32_t map_shared_rank(uint32_t bar, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(cta));
  return remote;
}

// --- cluster launch control (sm_100) ---------------------------------------------------------------
// Asks to cancel a cluster that has not started; the 16-byte response lands at `response` (of every
// block of the cluster, Multicast) and completes 16 bytes on `bar`.
template <bool Multicast> __device__ __forceinline__ void clc_try_cancel(uint32_t response, uint32_t bar) {
#if __CUDA_ARCH__ >= 1000
  if constexpr (Multicast)
    asm volatile("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.multicast::cluster::all.b128 [%0], [%1];\n"
                 ::"r"(response), "r"(bar) : "memory");
  else
    asm volatile("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%0], [%1];\n"
                 ::"r"(response), "r"(bar) : "memory");
#endif
}
// Decodes a response: whether a cluster was canceled and, if so, its first block index.
__device__ __forceinline__ void clc_query(uint32_t response, bool& canceled, int32_t& x, int32_t& y, int32_t& z) {
#if __CUDA_ARCH__ >= 1000
  uint32_t c = 0;
  asm volatile(
      "{\n.reg .pred p;\n.reg .b128 r;\nld.shared.b128 r, [%4];\n"
      "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, r;\nselp.u32 %3, 1, 0, p;\n"
      "@p clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {%0, %1, %2, _}, r;\n}\n"
      : "=r"(x), "=r"(y), "=r"(z), "=r"(c) : "r"(response) : "memory");
  canceled = c != 0;
#else
  canceled = false;
  x = y = z = 0;
#endif
}

}  // namespace tilus
