/**
 * Reads a TensorFlow Lite model (a FlatBuffer, tensorflow/lite/schema/schema.fbs) into plain objects:
 * tensors with their constant data decoded to float32/int32, and operators with the options the converter
 * needs. Only the fields this project's conversions use are read, so no schema compiler or flatbuffers
 * dependency is needed: a FlatBuffer table is a vtable of field offsets, read here by field id.
 */
import { float16ToFloat32, type HostTensor } from './tfjs-graph.ts';

class Table {
  constructor(
    private readonly view: DataView,
    private readonly position: number,
  ) {}

  /** Offset of field `id` from the table's start, or 0 when the field is absent (its default applies). */
  private offset(id: number): number {
    const vtable = this.position - this.view.getInt32(this.position, true);
    const entry = 4 + 2 * id;
    if (entry >= this.view.getUint16(vtable, true)) return 0;
    return this.view.getUint16(vtable + entry, true);
  }

  private target(at: number): number {
    return at + this.view.getUint32(at, true);
  }

  uint8(id: number, fallback = 0): number {
    const offset = this.offset(id);
    return offset ? this.view.getUint8(this.position + offset) : fallback;
  }

  int8(id: number, fallback = 0): number {
    const offset = this.offset(id);
    return offset ? this.view.getInt8(this.position + offset) : fallback;
  }

  int32(id: number, fallback = 0): number {
    const offset = this.offset(id);
    return offset ? this.view.getInt32(this.position + offset, true) : fallback;
  }

  uint32(id: number, fallback = 0): number {
    const offset = this.offset(id);
    return offset ? this.view.getUint32(this.position + offset, true) : fallback;
  }

  table(id: number): Table | undefined {
    const offset = this.offset(id);
    return offset ? new Table(this.view, this.target(this.position + offset)) : undefined;
  }

  private vector(id: number): { start: number; length: number } | undefined {
    const offset = this.offset(id);
    if (!offset) return undefined;
    const at = this.target(this.position + offset);
    return { start: at + 4, length: this.view.getUint32(at, true) };
  }

  string(id: number): string {
    const vector = this.vector(id);
    if (!vector) return '';
    return new TextDecoder().decode(this.bytes(id));
  }

  int32s(id: number): number[] {
    const vector = this.vector(id);
    if (!vector) return [];
    return Array.from({ length: vector.length }, (_, i) => this.view.getInt32(vector.start + 4 * i, true));
  }

  bytes(id: number): Uint8Array {
    const vector = this.vector(id);
    if (!vector) return new Uint8Array(0);
    return new Uint8Array(this.view.buffer, this.view.byteOffset + vector.start, vector.length);
  }

  tables(id: number): Table[] {
    const vector = this.vector(id);
    if (!vector) return [];
    return Array.from(
      { length: vector.length },
      (_, i) => new Table(this.view, this.target(vector.start + 4 * i)),
    );
  }
}

/** schema.fbs BuiltinOperator values of the operators met so far. */
export const TFLITE_OPERATORS: Readonly<Record<number, string>> = {
  0: 'ADD',
  2: 'CONCATENATION',
  3: 'CONV_2D',
  4: 'DEPTHWISE_CONV_2D',
  6: 'DEQUANTIZE',
  14: 'LOGISTIC',
  22: 'RESHAPE',
};

const TENSOR_TYPES: Readonly<Record<number, string>> = { 0: 'float32', 1: 'float16', 2: 'int32' };
const ACTIVATIONS: Readonly<Record<number, TfliteActivation>> = { 0: 'none', 1: 'relu', 3: 'relu6' };

export type TfliteActivation = 'none' | 'relu' | 'relu6';

export interface TfliteTensor {
  name: string;
  shape: number[];
  /** Constant data (weights, shapes), decoded to float32 (float16 included) or int32; absent for activations. */
  constant?: HostTensor;
}

export interface TfliteOperator {
  type: string;
  inputs: number[];
  outputs: number[];
  /** CONV_2D and DEPTHWISE_CONV_2D. */
  padding?: 'same' | 'valid';
  strides?: [number, number];
  dilations?: [number, number];
  /** CONV_2D, DEPTHWISE_CONV_2D, ADD, CONCATENATION. */
  activation?: TfliteActivation;
  /** CONCATENATION. */
  axis?: number;
}

export interface TfliteModel {
  tensors: TfliteTensor[];
  inputs: number[];
  outputs: number[];
  operators: TfliteOperator[];
}

function decodeConstant(name: string, type: number, shape: number[], bytes: Uint8Array): HostTensor {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const count = shape.reduce((product, size) => product * size, 1);
  const kind = TENSOR_TYPES[type];
  const width = kind === 'float16' ? 2 : 4;
  if (!kind) throw new Error(`tensor ${name}: type ${type} is not supported`);
  if (bytes.byteLength !== count * width) {
    throw new Error(`tensor ${name}: ${bytes.byteLength} bytes for ${count} ${kind} values`);
  }
  if (kind === 'int32') {
    const data = Int32Array.from({ length: count }, (_, i) => view.getInt32(4 * i, true));
    return { dtype: 'int32', shape, data };
  }
  const data = Float32Array.from({ length: count }, (_, i) =>
    kind === 'float16' ? float16ToFloat32(view.getUint16(2 * i, true)) : view.getFloat32(4 * i, true),
  );
  return { dtype: 'float32', shape, data };
}

function activationOf(code: number, where: string): TfliteActivation {
  const activation = ACTIVATIONS[code];
  if (!activation) throw new Error(`${where}: fused activation ${code} is not supported`);
  return activation;
}

function operatorOf(table: Table, type: string, where: string): TfliteOperator {
  const operator: TfliteOperator = { type, inputs: table.int32s(1), outputs: table.int32s(2) };
  const options = table.table(4);
  switch (type) {
    case 'CONV_2D':
    case 'DEPTHWISE_CONV_2D': {
      if (!options) throw new Error(`${where}: no options`);
      const depthwise = type === 'DEPTHWISE_CONV_2D';
      // Conv2DOptions: padding, stride_w, stride_h, activation, dilation_w, dilation_h;
      // DepthwiseConv2DOptions has depth_multiplier at 3 and shifts the rest by one.
      const activationField = depthwise ? 4 : 3;
      const dilationField = depthwise ? 5 : 4;
      if (depthwise && options.int32(3, 1) !== 1) throw new Error(`${where}: depth multiplier ≠ 1`);
      operator.padding = options.int8(0) === 0 ? 'same' : 'valid';
      operator.strides = [options.int32(2, 1), options.int32(1, 1)];
      operator.dilations = [options.int32(dilationField + 1, 1), options.int32(dilationField, 1)];
      operator.activation = activationOf(options.int8(activationField), where);
      break;
    }
    case 'ADD':
      operator.activation = activationOf(options?.int8(0) ?? 0, where);
      break;
    case 'CONCATENATION':
      operator.axis = options?.int32(0) ?? 0;
      operator.activation = activationOf(options?.int8(1) ?? 0, where);
      break;
    default:
      break;
  }
  return operator;
}

/** Parses a .tflite file's first subgraph. Throws on operators or tensor types it does not know. */
export function readTfliteModel(bytes: Uint8Array): TfliteModel {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const model = new Table(view, view.getUint32(0, true));
  // Model: version 0, operator_codes 1, subgraphs 2, description 3, buffers 4.
  const operatorCodes = model.tables(1).map((code) => Math.max(code.int8(0), code.int32(3)));
  const [subgraph, ...others] = model.tables(2);
  if (!subgraph || others.length) throw new Error('expected exactly one subgraph');
  const buffers = model.tables(4);
  // SubGraph: tensors 0, inputs 1, outputs 2, operators 3. Tensor: shape 0, type 1, buffer 2, name 3.
  const tensors = subgraph.tables(0).map((tensor): TfliteTensor => {
    const name = tensor.string(3);
    const shape = tensor.int32s(0);
    const data = buffers[tensor.uint32(2)]?.bytes(0) ?? new Uint8Array(0);
    if (data.byteLength === 0) return { name, shape };
    return { name, shape, constant: decodeConstant(name, tensor.uint8(1), shape, data) };
  });
  const operators = subgraph.tables(3).map((table, index) => {
    const code = operatorCodes[table.uint32(0)];
    const type = code === undefined ? undefined : TFLITE_OPERATORS[code];
    if (!type) throw new Error(`operator ${index}: builtin code ${code} is not supported`);
    return operatorOf(table, type, `operator ${index} (${type})`);
  });
  return { tensors, inputs: subgraph.int32s(1), outputs: subgraph.int32s(2), operators };
}
