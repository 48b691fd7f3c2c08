import ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { readTfliteModel } from '#layers/convert/tflite-model.ts';
import { convertTfliteModel } from '#layers/convert/tflite-to-onnx.ts';
import { writeFlatBuffer, type FlatTable } from '../../support/flatbuffer-writer.ts';

// schema.fbs codes: builtin operators, tensor types, fused activations, padding.
const CONV_2D = 3;
const DEPTHWISE_CONV_2D = 4;
const ADD = 0;
const RESHAPE = 22;
const CONCATENATION = 2;
const DEQUANTIZE = 6;
const FLOAT32 = 0;
const FLOAT16 = 1;
const INT32 = 2;
const RELU = 1;
const RELU6 = 3;
const SAME = 0;

/** Float16 bits of a value that float16 holds exactly (small multiples of 1/8 here). */
function float16Bits(value: number): number {
  if (value === 0) return 0;
  const sign = value < 0 ? 0x8000 : 0;
  const magnitude = Math.abs(value);
  const exponent = Math.floor(Math.log2(magnitude));
  const fraction = Math.round((magnitude / 2 ** exponent - 1) * 1024);
  return sign | ((exponent + 15) << 10) | fraction;
}

function littleEndian(values: readonly number[], type: number): Uint8Array {
  const width = type === FLOAT16 ? 2 : 4;
  const view = new DataView(new ArrayBuffer(values.length * width));
  values.forEach((value, i) => {
    if (type === FLOAT16) view.setUint16(2 * i, float16Bits(value), true);
    else if (type === INT32) view.setInt32(4 * i, value, true);
    else view.setFloat32(4 * i, value, true);
  });
  return new Uint8Array(view.buffer);
}

/** Seeded values in [-2, 2] in steps of 1/8: exact in float16 and float32. */
function values(count: number, seed: number): number[] {
  let state = seed;
  return Array.from({ length: count }, () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return (Math.floor((state / 2 ** 31) * 33) - 16) / 8;
  });
}

/** NHWC convolution with TF's SAME padding (the odd pixel at the end), filters [out, kh, kw, in]. */
function convolveNhwc(
  input: { data: number[]; height: number; width: number; channels: number },
  filter: { data: number[]; outputs: number; size: number },
  bias: number[],
  stride: number,
  depthwise: boolean,
): { data: number[]; height: number; width: number; channels: number } {
  const height = Math.ceil(input.height / stride);
  const width = Math.ceil(input.width / stride);
  const padTop = Math.floor(Math.max((height - 1) * stride + filter.size - input.height, 0) / 2);
  const padLeft = Math.floor(Math.max((width - 1) * stride + filter.size - input.width, 0) / 2);
  const data: number[] = [];
  for (let y = 0; y < height; y += 1)
    for (let x = 0; x < width; x += 1)
      for (let o = 0; o < filter.outputs; o += 1) {
        let sum = bias[o]!;
        for (let ky = 0; ky < filter.size; ky += 1)
          for (let kx = 0; kx < filter.size; kx += 1) {
            const iy = y * stride + ky - padTop;
            const ix = x * stride + kx - padLeft;
            if (iy < 0 || ix < 0 || iy >= input.height || ix >= input.width) continue;
            const pixel = (iy * input.width + ix) * input.channels;
            if (depthwise) {
              sum += input.data[pixel + o]! * filter.data[(ky * filter.size + kx) * filter.outputs + o]!;
            } else {
              for (let i = 0; i < input.channels; i += 1)
                sum +=
                  input.data[pixel + i]! *
                  filter.data[((o * filter.size + ky) * filter.size + kx) * input.channels + i]!;
            }
          }
        data.push(sum);
      }
  return { data, height, width, channels: filter.outputs };
}

describe('TFLite to ONNX', () => {
  it('reads a FlatBuffer model and converts its convolutions, residual add, reshapes and concat like TFLite computes them', async () => {
    // Prepare: input [1,5,6,2] → CONV_2D 3×3 stride 2 (float16 weights via DEQUANTIZE, ReLU6)
    // → DEPTHWISE 3×3 (ReLU) → ADD(conv, depthwise) → two RESHAPEs to [1,9,3] → CONCATENATION on -1.
    const input = { data: values(60, 1), height: 5, width: 6, channels: 2 };
    const convFilter = values(3 * 3 * 3 * 2, 2);
    const convBias = values(3, 3);
    const depthFilter = values(3 * 3 * 3, 4);
    const depthBias = values(3, 5);
    const buffers: FlatTable[] = [
      [],
      [],
      [{ bytes: littleEndian(convFilter, FLOAT16) }],
      [{ bytes: littleEndian(convBias, FLOAT32) }],
      [{ bytes: littleEndian(depthFilter, FLOAT32) }],
      [{ bytes: littleEndian(depthBias, FLOAT32) }],
      [{ bytes: littleEndian([1, 9, 3], INT32) }],
    ];
    const tensor = (name: string, shape: number[], type: number, buffer = 0): FlatTable => [
      { i32s: shape },
      { u8: type },
      { u32: buffer },
      { string: name },
    ];
    const tensors = [
      tensor('input', [1, 5, 6, 2], FLOAT32, 1),
      tensor('conv/filter', [3, 3, 3, 2], FLOAT16, 2),
      tensor('conv/filter_dequantize', [3, 3, 3, 2], FLOAT32),
      tensor('conv/bias', [3], FLOAT32, 3),
      tensor('conv', [1, 3, 3, 3], FLOAT32),
      tensor('depthwise/filter', [1, 3, 3, 3], FLOAT32, 4),
      tensor('depthwise/bias', [3], FLOAT32, 5),
      tensor('depthwise', [1, 3, 3, 3], FLOAT32),
      tensor('sum', [1, 3, 3, 3], FLOAT32),
      tensor('shape', [3], INT32, 6),
      tensor('sum/reshaped', [1, 9, 3], FLOAT32),
      tensor('depthwise/reshaped', [1, 9, 3], FLOAT32),
      tensor('joined', [1, 9, 6], FLOAT32),
    ];
    const codes = [DEQUANTIZE, CONV_2D, DEPTHWISE_CONV_2D, ADD, RESHAPE, CONCATENATION];
    const op = (code: number, inputs: number[], outputs: number[], options?: FlatTable): FlatTable => [
      { u32: codes.indexOf(code) },
      { i32s: inputs },
      { i32s: outputs },
      undefined,
      options && { table: options },
    ];
    const operators = [
      op(DEQUANTIZE, [1], [2]),
      // Conv2DOptions: padding, stride_w, stride_h, fused activation.
      op(CONV_2D, [0, 2, 3], [4], [{ i8: SAME }, { i32: 2 }, { i32: 2 }, { i8: RELU6 }]),
      // DepthwiseConv2DOptions: padding, stride_w, stride_h, depth multiplier, fused activation.
      op(DEPTHWISE_CONV_2D, [4, 5, 6], [7], [{ i8: SAME }, { i32: 1 }, { i32: 1 }, { i32: 1 }, { i8: RELU }]),
      op(ADD, [4, 7], [8], [{ i8: 0 }]),
      op(RESHAPE, [8, 9], [10]),
      op(RESHAPE, [7, 9], [11]),
      op(CONCATENATION, [10, 11], [12], [{ i32: -1 }, { i8: 0 }]),
    ];
    const bytes = writeFlatBuffer([
      { u32: 3 },
      // OperatorCode: deprecated_builtin_code (int8), custom_code, version, builtin_code (int32).
      { tables: codes.map((code): FlatTable => [{ i8: code }, undefined, { i32: 1 }, { i32: code }]) },
      { tables: [[{ tables: tensors }, { i32s: [0] }, { i32s: [12] }, { tables: operators }]] },
      { string: 'test' },
      { tables: buffers },
    ]);

    // Act
    const model = readTfliteModel(bytes);
    const onnx = convertTfliteModel(model, {
      producer: 'test',
      metadata: {},
      inputName: 'image',
      outputNames: ['joined'],
    });
    const session = await ort.InferenceSession.create(onnx);
    const nchw = new Float32Array(60);
    for (let y = 0; y < 5; y += 1)
      for (let x = 0; x < 6; x += 1)
        for (let c = 0; c < 2; c += 1) nchw[(c * 5 + y) * 6 + x] = input.data[(y * 6 + x) * 2 + c]!;
    const outputs = await session.run({ image: new ort.Tensor('float32', nchw, [1, 2, 5, 6]) });

    // Assert
    expect(model.operators.map((operator) => operator.type)).toEqual([
      'DEQUANTIZE',
      'CONV_2D',
      'DEPTHWISE_CONV_2D',
      'ADD',
      'RESHAPE',
      'RESHAPE',
      'CONCATENATION',
    ]);
    expect(Array.from(model.tensors[1]!.constant!.data)).toEqual(convFilter);
    const conv = convolveNhwc(input, { data: convFilter, outputs: 3, size: 3 }, convBias, 2, false);
    conv.data = conv.data.map((v) => Math.min(6, Math.max(0, v)));
    const depthwise = convolveNhwc(conv, { data: depthFilter, outputs: 3, size: 3 }, depthBias, 1, true);
    depthwise.data = depthwise.data.map((v) => Math.max(0, v));
    const sum = conv.data.map((v, i) => v + depthwise.data[i]!);
    const expected: number[] = [];
    for (let row = 0; row < 9; row += 1)
      expected.push(...sum.slice(row * 3, row * 3 + 3), ...depthwise.data.slice(row * 3, row * 3 + 3));
    const joined = outputs['joined']!;
    expect(joined.dims).toEqual([1, 9, 6]);
    const actual = Array.from(joined.data as Float32Array);
    expect(actual).toHaveLength(expected.length);
    actual.forEach((value, i) => expect(value, `element ${i}`).toBeCloseTo(expected[i]!, 4));
    // Not a trivial graph: the activations clip and the output spreads.
    expect(new Set(actual.map((v) => v.toFixed(3))).size).toBeGreaterThan(20);
  });

  it('refuses an operator it does not convert, naming it', () => {
    const bytes = writeFlatBuffer([
      { u32: 3 },
      { tables: [[{ i8: 9 }, undefined, { i32: 1 }, { i32: 9 }]] },
      {
        tables: [
          [
            { tables: [[{ i32s: [1, 4] }, { u8: FLOAT32 }, { u32: 0 }, { string: 'x' }]] },
            { i32s: [0] },
            { i32s: [0] },
            { tables: [[{ u32: 0 }, { i32s: [0] }, { i32s: [0] }]] },
          ],
        ],
      },
      undefined,
      { tables: [[]] },
    ]);
    expect(() => readTfliteModel(bytes)).toThrow(/operator 0: builtin code 9 is not supported/);
  });
});
