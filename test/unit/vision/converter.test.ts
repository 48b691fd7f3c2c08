import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import { describe, expect, it } from 'vitest';
import {
  convertTfjsGraph,
  convFilterToOihw,
  correctedBias,
  depthwiseFilterToOihw,
  foldConstant,
  perChannelScales,
  quantizeBias,
  quantizeWeights,
  WEIGHT_LEVELS,
  type ConversionSpec,
} from '#layers/convert/tf-to-onnx.ts';
import {
  float16ToFloat32,
  readTfjsGraph,
  type HostTensor,
  type TfjsGraph,
  type TfjsModelJson,
  type TfNode,
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

describe('8-bit quantisation', () => {
  it('maps each output channel’s largest weight magnitude to ±63 and rounds the rest to its scale', () => {
    // Prepare: two output channels of three weights each (OIHW, channel-major)
    const weights = Float32Array.of(0.6, -1, 0.25, 0, 0, 0);
    // Act
    const scales = perChannelScales(weights, 2);
    const quantised = quantizeWeights(weights, scales);
    // Assess: 7 bits (no 16-bit saturation without VNNI); the all-zero channel keeps a usable scale of 1
    expect(WEIGHT_LEVELS).toBe(63);
    expect(Array.from(scales)).toEqual([Math.fround(1 / 63), 1]);
    expect(Array.from(quantised)).toEqual([38, -63, 16, 0, 0, 0]);
  });

  it('keeps biases exact on all-zero channels and inside int32 on tiny-weight channels', () => {
    // Prepare: channel 0 all zero with a bias of 0.713; channel 1 with tiny weights and a large bias;
    // channel 2 ordinary. Activations quantised at a scale of 0.02.
    const weights = Float32Array.of(0, 0, 1e-9, -1e-9, 0.5, -0.25);
    const bias = Float32Array.of(0.713, 50, 0.1);
    const activationScale = 0.02;
    // Act
    const scales = perChannelScales(weights, 3, bias, activationScale);
    const biasScales = scales.map((scale) => scale * activationScale);
    const quantised = quantizeBias(bias, biasScales);
    // Assess: every bias dequantises to itself (to float32 rounding) and none wrapped around
    for (let o = 0; o < 3; o += 1) {
      expect(quantised[o]! * biasScales[o]!).toBeCloseTo(bias[o]!, 5);
      expect(Math.abs(quantised[o]!)).toBeLessThanOrEqual(2 ** 31 - 1);
    }
    expect(scales[2]).toBe(Math.fround(0.5 / 63)); // the ordinary channel is untouched
  });

  /**
   * A residual block like MobileNetV2's (1×1 conv + Relu6, 3×3 depthwise + Relu6, linear 1×1 conv, plus
   * the input), then a linear 1×1 head.
   */
  function residualBlock(): TfjsGraph {
    const b64 = (text: string) => Buffer.from(text).toString('base64');
    const ints = (...values: number[]) => ({ list: { i: values.map(String) } });
    const conv = (name: string, op: string, input: string, fused: string[]): TfNode => ({
      name,
      op,
      input: [input, `${name}/w`, `${name}/b`],
      attr: {
        strides: ints(1, 1, 1, 1),
        padding: { s: b64('SAME') },
        fused_ops: { list: { s: fused.map(b64) } },
      },
    });
    const random = (seed: number, length: number, amplitude: number) =>
      Float32Array.from({ length }, (_, i) => amplitude * Math.sin(seed * 7.1 + i * 1.37));
    const weights = new Map<string, HostTensor>([
      ['expand/w', { dtype: 'float32', shape: [1, 1, 4, 8], data: random(1, 32, 0.6) }],
      ['expand/b', { dtype: 'float32', shape: [8], data: random(2, 8, 0.2) }],
      ['depthwise/w', { dtype: 'float32', shape: [3, 3, 8, 1], data: random(3, 72, 0.4) }],
      ['depthwise/b', { dtype: 'float32', shape: [8], data: random(4, 8, 0.1) }],
      ['project/w', { dtype: 'float32', shape: [1, 1, 8, 4], data: random(5, 32, 0.5) }],
      ['project/b', { dtype: 'float32', shape: [4], data: random(6, 4, 0.1) }],
      ['head/w', { dtype: 'float32', shape: [1, 1, 4, 4], data: random(7, 16, 0.5) }],
      ['head/b', { dtype: 'float32', shape: [4], data: random(8, 4, 0.1) }],
    ]);
    return {
      weights,
      nodes: [
        { name: 'input', op: 'Placeholder' },
        conv('expand', '_FusedConv2D', 'input', ['BiasAdd', 'Relu6']),
        conv('depthwise', 'FusedDepthwiseConv2dNative', 'expand', ['BiasAdd', 'Relu6']),
        conv('project', '_FusedConv2D', 'depthwise', ['BiasAdd']),
        { name: 'sum', op: 'AddV2', input: ['project', 'input'] },
        conv('head', '_FusedConv2D', 'sum', ['BiasAdd']),
      ],
    };
  }

  const spec: ConversionSpec = {
    placeholder: 'input',
    inputName: 'x',
    inputShape: [1, 6, 6, 4],
    outputs: [{ name: 'y', tensor: 'head', shape: [1, 6, 6, 4] }],
    producer: 'test',
    metadata: {},
  };

  async function run(model: Uint8Array, input: Float32Array): Promise<Float32Array> {
    const session = await ort.InferenceSession.create(model);
    const outputs = await session.run({ x: new ort.Tensor('float32', input, [1, 6, 6, 4]) });
    return outputs['y']!.data as Float32Array;
  }

  function channelMeans(data: Float32Array, channels: number): number[] {
    return Array.from({ length: channels }, (_, c) => {
      let sum = 0;
      for (let i = c; i < data.length; i += channels) sum += data[i]!;
      return sum / (data.length / channels);
    });
  }

  /** What calibration measures, on one input: every exposed activation's range and channel means. */
  async function calibrated(graph: TfjsGraph, input: Float32Array) {
    const exposed = await ort.InferenceSession.create(
      convertTfjsGraph(graph, { ...spec, exposeActivations: true }),
    );
    const outputs = await exposed.run({ x: new ort.Tensor('float32', input, [1, 6, 6, 4]) });
    const names = exposed.outputNames.filter((name) => name !== 'y');
    const values = (name: string) => outputs[name]!.data as Float32Array;
    return {
      ranges: Object.fromEntries(
        names.map((name) => [name, [Math.min(...values(name)), Math.max(...values(name))] as const]),
      ),
      means: Object.fromEntries(
        names.map((name) => [name, channelMeans(values(name), outputs[name]!.dims[3]!)]),
      ),
    };
  }

  const INPUT = Float32Array.from({ length: 144 }, (_, i) => (i * 0.618) % 1);

  it('exposes, then quantises, every activation entering a Conv or an Add, and stays close to float', async () => {
    // Prepare: an input in [0, 1) and the float graph's activations over it
    const graph = residualBlock();
    const input = INPUT;
    const { ranges } = await calibrated(graph, input);
    // Act
    const quantisedModel = convertTfjsGraph(graph, { ...spec, quantization: { ranges } });
    const [float, quantised] = await Promise.all([
      run(convertTfjsGraph(graph, spec), input),
      run(quantisedModel, input),
    ]);
    // Assess: the inputs of the four convs and of the Add (input, expand, depthwise, project, sum)
    expect(Object.keys(ranges).sort()).toEqual(['depthwise', 'expand', 'input', 'project', 'sum']);
    const ops = onnxProto.onnx.ModelProto.decode(quantisedModel).graph!.node!.map((node) => node.opType);
    // One QDQ pair per activation, and a DequantizeLinear for each conv's weights and bias
    expect(ops.filter((op) => op === 'QuantizeLinear')).toHaveLength(5);
    expect(ops.filter((op) => op === 'DequantizeLinear')).toHaveLength(5 + 4 + 4);
    const largest = Math.max(...float.map(Math.abs));
    const error = Math.max(...float.map((value, i) => Math.abs(value - quantised[i]!)));
    expect(error / largest).toBeLessThan(0.03);
    expect(error).toBeGreaterThan(0); // the values went through 8-bit rounding
  });

  it('corrects each bias for the shift its channel’s rounded weights cause on the mean input', () => {
    // Prepare: a 2×2-input-channel conv with 1×2 kernels (OIHW) and a depthwise conv with multiplier 2
    const weights = Float32Array.of(0.3, -0.71, 0.05, 0.9, -0.2, 0.44, 0.61, -0.13);
    const means = [1.5, -0.4];
    const bias = Float32Array.of(0.1, -0.2);
    const depthwiseWeights = Float32Array.of(0.33, -0.5, 0.07, 0.29, -0.81, 0.4, 0.12, 0.5);
    const depthwiseBias = Float32Array.of(0, 0.1, 0.2, 0.3);
    /** Σ weight × mean of its input channel + bias, per output channel. */
    const expected = (
      w: ArrayLike<number>,
      b: ArrayLike<number>,
      inputOf: (o: number, j: number) => number,
      perChannel: number,
    ) =>
      Array.from(b, (value, o) => {
        let sum = value;
        for (let j = 0; j < perChannel; j += 1) sum += w[o * perChannel + j]! * means[inputOf(o, j)]!;
        return sum;
      });
    for (const { w, b, layout, inputOf, perChannel } of [
      {
        w: weights,
        b: bias,
        layout: { kernelArea: 2 },
        inputOf: (_: number, j: number) => j >> 1,
        perChannel: 4,
      },
      {
        w: depthwiseWeights,
        b: depthwiseBias,
        layout: { kernelArea: 2, depthwiseMultiplier: 2 },
        inputOf: (o: number) => o >> 1,
        perChannel: 2,
      },
    ]) {
      const scales = perChannelScales(w, b.length);
      const quantised = quantizeWeights(w, scales);
      const dequantised = Array.from(quantised, (q, i) => q * scales[Math.floor(i / perChannel)]!);
      // Act
      const corrected = correctedBias(b, w, quantised, scales, means, layout);
      // Assess: with the corrected bias the rounded weights give the float weights' output on the mean
      // input (to float32 rounding); with the plain bias they do not
      const float = expected(w, b, inputOf, perChannel);
      const rounded = expected(dequantised, corrected, inputOf, perChannel);
      rounded.forEach((value, o) => expect(value).toBeCloseTo(float[o]!, 6));
      const uncorrected = expected(dequantised, b, inputOf, perChannel);
      expect(Math.max(...uncorrected.map((value, o) => Math.abs(value - float[o]!)))).toBeGreaterThan(1e-4);
    }
  });

  it('moves the quantised graph’s mean output towards the float graph’s with calibrated channel means', async () => {
    // Prepare: ranges and channel means of the residual block over its input, as calibration measures them
    const graph = residualBlock();
    const input = INPUT;
    const { ranges, means } = await calibrated(graph, input);
    // Act
    const [float, plain, corrected] = await Promise.all([
      run(convertTfjsGraph(graph, spec), input),
      run(convertTfjsGraph(graph, { ...spec, quantization: { ranges } }), input),
      run(convertTfjsGraph(graph, { ...spec, quantization: { ranges, means } }), input),
    ]);
    // Assess: the per-channel mean error of the output shrinks
    const meanError = (output: Float32Array) => {
      const [a, b] = [channelMeans(output, 4), channelMeans(float, 4)];
      return a.reduce((sum, value, c) => sum + Math.abs(value - b[c]!), 0) / 4;
    };
    expect(meanError(corrected)).toBeLessThan(meanError(plain) / 2);
  });

  it('refuses an activation without calibrated channel means when means are given', () => {
    const ranges = {
      input: [0, 1],
      expand: [0, 6],
      depthwise: [0, 6],
      project: [-1, 1],
      sum: [-1, 2],
    } as const;
    expect(() =>
      convertTfjsGraph(residualBlock(), {
        ...spec,
        quantization: { ranges, means: { input: [0.5, 0.5, 0.5, 0.5] } },
      }),
    ).toThrow(/no calibrated channel means for activation expand/);
  });

  it('refuses an activation without a calibrated range', () => {
    expect(() => convertTfjsGraph(residualBlock(), { ...spec, quantization: { ranges: {} } })).toThrow(
      /no calibrated range for activation input/,
    );
  });
});
