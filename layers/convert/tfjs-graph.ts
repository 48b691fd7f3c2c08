/**
 * Reads a TensorFlow.js graph model (model.json topology + binary weights) into plain host tensors, decoding
 * the weight quantisations TF.js uses (uint8/uint16 affine, float16) exactly as TF.js does at load time, so
 * that the converted ONNX graph and the TF.js reference see bit-identical float32 weights.
 */

/** One node of the TF GraphDef as TF.js serialises it (attribute values keep their protobuf JSON form). */
export interface TfNode {
  name: string;
  op: string;
  input?: string[];
  attr?: Record<string, TfAttr>;
}

export interface TfAttr {
  s?: string;
  i?: string;
  f?: number;
  b?: boolean;
  type?: string;
  list?: { i?: string[]; s?: string[]; f?: number[] };
  shape?: { dim?: { size?: string }[] };
}

export interface TfWeightSpec {
  name: string;
  shape: number[];
  dtype: 'float32' | 'int32' | 'bool';
  quantization?: { dtype: 'uint8' | 'uint16' | 'float16'; min?: number; scale?: number };
}

export interface TfjsModelJson {
  format: string;
  modelTopology: { node: TfNode[] };
  weightsManifest: { paths: string[]; weights: TfWeightSpec[] }[];
}

/** A constant tensor held in memory during conversion. Integers are kept as float64 numbers (all small). */
export interface HostTensor {
  dtype: 'float32' | 'int32';
  shape: number[];
  data: Float32Array | Int32Array;
}

export interface TfjsGraph {
  nodes: TfNode[];
  weights: Map<string, HostTensor>;
}

export function elementCount(shape: readonly number[]): number {
  return shape.reduce((product, size) => product * size, 1);
}

/** IEEE 754 half → single precision, including subnormals, infinities and NaN. */
export function float16ToFloat32(half: number): number {
  const sign = half & 0x8000 ? -1 : 1;
  const exponent = (half >> 10) & 0x1f;
  const fraction = half & 0x03ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 0x1f) return fraction ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

function decodeWeight(
  spec: TfWeightSpec,
  bytes: Buffer,
  offset: number,
): { tensor: HostTensor; byteLength: number } {
  const count = elementCount(spec.shape);
  const quantization = spec.quantization;
  if (spec.dtype === 'bool') throw new Error(`weight ${spec.name}: bool weights are not supported`);
  if (!quantization) {
    const byteLength = count * 4;
    const slice = bytes.subarray(offset, offset + byteLength);
    const copy = new Uint8Array(slice).buffer;
    const data = spec.dtype === 'float32' ? new Float32Array(copy) : new Int32Array(copy);
    return { tensor: { dtype: spec.dtype, shape: spec.shape, data }, byteLength };
  }
  const out = new Float32Array(count);
  if (quantization.dtype === 'float16') {
    for (let i = 0; i < count; i += 1) out[i] = float16ToFloat32(bytes.readUInt16LE(offset + i * 2));
    return { tensor: { dtype: 'float32', shape: spec.shape, data: out }, byteLength: count * 2 };
  }
  // Affine quantisation: TF.js computes `v * scale + min` in float32; Float32Array storage rounds the same way.
  const min = quantization.min ?? 0;
  const scale = quantization.scale ?? 1;
  const width = quantization.dtype === 'uint8' ? 1 : 2;
  for (let i = 0; i < count; i += 1) {
    const stored = width === 1 ? bytes[offset + i]! : bytes.readUInt16LE(offset + i * 2);
    out[i] = stored * scale + min;
  }
  const tensor: HostTensor =
    spec.dtype === 'int32'
      ? { dtype: 'int32', shape: spec.shape, data: Int32Array.from(out, Math.round) }
      : { dtype: 'float32', shape: spec.shape, data: out };
  return { tensor, byteLength: count * width };
}

/** Decodes every weight of the manifest from the concatenated shard bytes (shards in manifest order). */
export function readTfjsGraph(model: TfjsModelJson, weightBytes: Buffer): TfjsGraph {
  const weights = new Map<string, HostTensor>();
  let offset = 0;
  for (const group of model.weightsManifest) {
    for (const spec of group.weights) {
      const { tensor, byteLength } = decodeWeight(spec, weightBytes, offset);
      weights.set(spec.name, tensor);
      offset += byteLength;
    }
  }
  if (offset !== weightBytes.length) {
    throw new Error(`weights manifest describes ${offset} bytes but the shards hold ${weightBytes.length}`);
  }
  return { nodes: model.modelTopology.node, weights };
}

/** Decodes a TF string attribute (base64 in TF.js JSON). */
export function attrString(node: TfNode, key: string): string | undefined {
  const value = node.attr?.[key]?.s;
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
}

export function attrInts(node: TfNode, key: string): number[] | undefined {
  return node.attr?.[key]?.list?.i?.map(Number);
}

export function attrStrings(node: TfNode, key: string): string[] {
  return (node.attr?.[key]?.list?.s ?? []).map((value) => Buffer.from(value, 'base64').toString('utf8'));
}
