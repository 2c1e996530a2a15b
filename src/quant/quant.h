// Fast group-wise quantization and dequantization of rows on the CPU, used to
// pack weights, to store KV per token (a row of head_dim values quantized in
// groups) and to widen weights next to a matrix product. Each function equals
// its reference in quant_ref.h bit for bit (same bytes, same floats) on every
// CPU; quant/isa.h picks the instruction set. (Blocks whose stored scale or
// minimum is itself NaN dequantize to NaN; which NaN payload is unspecified.)
// Single-threaded: callers split rows across threads (rows are independent).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata {

// x: [n] floats -> y: row_bytes(t, n) bytes. t quantized and n a multiple of
// its group (asserted: callers validating input check row_elems_ok first).
void quantize_row(DType t, const float* x, void* y, int64_t n);
// x: row_bytes(t, n) bytes -> y: [n] floats.
void dequantize_row(DType t, const void* x, float* y, int64_t n);
// x: row_bytes(t, n) bytes -> y: [n] bf16 (each dequantized value rounded to
// nearest even), for bf16 matrix products.
void dequantize_row_bf16(DType t, const void* x, uint16_t* y, int64_t n);

// Multi-row forms. x: [n_rows, n] floats with rows x_stride floats apart;
// y: n_rows rows of row_bytes(t, n) bytes, y_stride bytes apart.
void quantize_rows(DType t, const float* x, int64_t x_stride, void* y, size_t y_stride,
                   int64_t n_rows, int64_t n);
// x: n_rows quantized rows, x_stride bytes apart; y: [n_rows, n], rows
// y_stride elements apart.
void dequantize_rows(DType t, const void* x, size_t x_stride, float* y, int64_t y_stride,
                     int64_t n_rows, int64_t n);
void dequantize_rows_bf16(DType t, const void* x, size_t x_stride, uint16_t* y, int64_t y_stride,
                          int64_t n_rows, int64_t n);

}  // namespace strata
