import { describe, expect, it } from 'vitest';
import { convFilterToOihw, depthwiseFilterToOihw, foldConstant } from '#layers/convert/tf-to-onnx.ts';
import {
  float16ToFloat32,
  readTfjsGraph,
  type HostTensor,
  type TfjsModelJson,
} from '#layers/convert/tfjs-graph.ts';

describe('float16ToFloat32', () => {
  it('decodes normal, subnormal, signed and special halves', () => {
    expect(float16ToFloat32(0x3c00)).toBe(1);
    expect(float16ToFloat32(0xc000)).toBe(-2);
    expect(float16ToFloat32(0x3555)).toBeCloseTo(0.333251953125, 12);
    expect(float16ToFloat32(0x0001)).toBe(2 ** -24);
    expect(float16ToFloat32(0x7c00)).toBe(Infinity);
    expect(float16ToFloat32(0x7e00)).toBeNaN();
  });
});

describe('readTfjsGraph', () => {
  it('dequantises uint8 weights as v·scale + min and reads float32 and int32 weights in manifest order', () => {
    // Prepare
    const model: TfjsModelJson = {
      format: 'graph-model',
      modelTopology: { node: [] },
      weightsManifest: [
        {
          paths: ['shard'],
          weights: [
            {
              name: 'q',
              shape: [3],
              dtype: 'float32',
              quantization: { dtype: 'uint8', min: -1, scale: 0.5 },
            },
            { name: 'f', shape: [1], dtype: 'float32' },
            { name: 'i', shape: [2], dtype: 'int32' },
          ],
        },
      ],
    };
    const bytes = Buffer.concat([
      Buffer.from([0, 2, 4]),
      Buffer.from(Float32Array.of(1.5).buffer),
      Buffer.from(Int32Array.of(7, -3).buffer),
    ]);

    // Act
    const { weights } = readTfjsGraph(model, bytes);

    // Assess
    expect(Array.from(weights.get('q')!.data)).toEqual([-1, 0, 1]);
    expect(Array.from(weights.get('f')!.data)).toEqual([1.5]);
    expect(Array.from(weights.get('i')!.data)).toEqual([7, -3]);
  });

  it('refuses shards whose size disagrees with the manifest', () => {
    const model: TfjsModelJson = {
      format: 'graph-model',
      modelTopology: { node: [] },
      weightsManifest: [{ paths: ['shard'], weights: [{ name: 'f', shape: [2], dtype: 'float32' }] }],
    };
    expect(() => readTfjsGraph(model, Buffer.alloc(12))).toThrow(/8 bytes but the shards hold 12/);
  });
});

describe('filter layouts', () => {
  it('moves a [kh, kw, cin, cout] convolution filter to [cout, cin, kh, kw]', () => {
    // Prepare: value encodes its TF position as y·1000 + x·100 + i·10 + o.
    const [kh, kw, cin, cout] = [2, 3, 2, 4];
    const data = new Float32Array(kh * kw * cin * cout);
    for (let y = 0; y < kh; y += 1)
      for (let x = 0; x < kw; x += 1)
        for (let i = 0; i < cin; i += 1)
          for (let o = 0; o < cout; o += 1)
            data[((y * kw + x) * cin + i) * cout + o] = y * 1000 + x * 100 + i * 10 + o;

    // Act
    const out = convFilterToOihw({ dtype: 'float32', shape: [kh, kw, cin, cout], data });

    // Assess: ONNX [o][i][y][x] for o=3, i=1, y=1, x=2.
    expect(out[((3 * cin + 1) * kh + 1) * kw + 2]).toBe(1000 + 200 + 10 + 3);
  });

  it('moves a depthwise [kh, kw, cin, m] filter to grouped [cin·m, 1, kh, kw] with channel c·m + k', () => {
    const [kh, kw, cin, m] = [1, 2, 3, 2];
    const data = new Float32Array(kh * kw * cin * m);
    for (let x = 0; x < kw; x += 1)
      for (let c = 0; c < cin; c += 1)
        for (let k = 0; k < m; k += 1) data[(x * cin + c) * m + k] = x * 100 + c * 10 + k;
    const out = depthwiseFilterToOihw({ dtype: 'float32', shape: [kh, kw, cin, m], data });
    expect(out[(2 * m + 1) * kw + 1]).toBe(100 + 20 + 1);
  });
});

describe('foldConstant', () => {
  const int = (shape: number[], values: number[]): HostTensor => ({
    dtype: 'int32',
    shape,
    data: Int32Array.from(values),
  });

  it('expands SparseToDense with no indices to the default value', () => {
    const folded = foldConstant({ name: 's', op: 'SparseToDense' }, [
      int([0, 1], []),
      int([1], [3]),
      int([0], []),
      int([], [0]),
    ]);
    expect(folded.shape).toEqual([3]);
    expect(Array.from(folded.data)).toEqual([0, 0, 0]);
  });

  it('places SparseToDense values at their indices', () => {
    const folded = foldConstant({ name: 's', op: 'SparseToDense' }, [
      int([2, 1], [0, 2]),
      int([1], [4]),
      int([2], [5, 6]),
      int([], [1]),
    ]);
    expect(Array.from(folded.data)).toEqual([5, 1, 6, 1]);
  });

  it('adds integer shape arithmetic elementwise', () => {
    const folded = foldConstant({ name: 'a', op: 'AddV2' }, [int([3], [1, -1, 80]), int([3], [0, 0, 0])]);
    expect(folded.dtype).toBe('int32');
    expect(Array.from(folded.data)).toEqual([1, -1, 80]);
  });

  it('refuses ops it cannot evaluate', () => {
    expect(() => foldConstant({ name: 'w', op: 'Where' }, [int([1], [1])])).toThrow(/cannot fold/);
  });
});
