/**
 * A small builder for ONNX ModelProto (opset 13) on top of onnx-proto's protobufjs classes: nodes,
 * initialisers and graph inputs/outputs, with unique names and deterministic encoding.
 */
import onnxProto from 'onnx-proto';
import type { HostTensor } from './tfjs-graph.ts';

const { onnx } = onnxProto;

export const OPSET_VERSION = 13;
const IR_VERSION = 7; // the IR that opset 13 shipped with; ORT accepts it

export type AttributeValue = number | number[] | string | { float: number } | { floats: number[] };

export interface ValueInfo {
  name: string;
  /** Dimension sizes; a string is a symbolic (dynamic) dimension. */
  shape: (number | string)[];
}

export class OnnxGraphBuilder {
  private readonly nodes: onnxProto.onnx.INodeProto[] = [];
  private readonly initializers: onnxProto.onnx.ITensorProto[] = [];
  private readonly initializerNames = new Set<string>();
  private readonly inputs: onnxProto.onnx.IValueInfoProto[] = [];
  private readonly outputs: onnxProto.onnx.IValueInfoProto[] = [];
  private counter = 0;

  /** A fresh tensor name derived from `base` (for tensors the source graph does not have). */
  uniqueName(base: string): string {
    this.counter += 1;
    return `${base}__${this.counter}`;
  }

  addInput(info: ValueInfo): void {
    this.inputs.push(valueInfo(info));
  }

  addOutput(info: ValueInfo): void {
    this.outputs.push(valueInfo(info));
  }

  hasInitializer(name: string): boolean {
    return this.initializerNames.has(name);
  }

  addFloatInitializer(name: string, shape: number[], data: Float32Array): string {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    return this.addInitializer(name, shape, onnx.TensorProto.DataType.FLOAT, bytes);
  }

  /** 8-bit tensors (quantised weights and zero points): an Int8Array is stored as INT8, a Uint8Array as UINT8. */
  addByteInitializer(name: string, shape: number[], data: Int8Array | Uint8Array): string {
    const dataType =
      data instanceof Int8Array ? onnx.TensorProto.DataType.INT8 : onnx.TensorProto.DataType.UINT8;
    return this.addInitializer(
      name,
      shape,
      dataType,
      new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    );
  }

  addInt32Initializer(name: string, shape: number[], data: Int32Array): string {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    return this.addInitializer(name, shape, onnx.TensorProto.DataType.INT32, bytes);
  }

  addInt64Initializer(name: string, shape: number[], values: readonly number[]): string {
    const data = new BigInt64Array(values.map((value) => BigInt(value)));
    return this.addInitializer(name, shape, onnx.TensorProto.DataType.INT64, new Uint8Array(data.buffer));
  }

  /** A host tensor as an initializer: float32 stays float32, int32 becomes int64 (what ONNX shape ops want). */
  addHostInitializer(name: string, tensor: HostTensor): string {
    if (tensor.dtype === 'float32')
      return this.addFloatInitializer(name, tensor.shape, tensor.data as Float32Array);
    return this.addInt64Initializer(name, tensor.shape, Array.from(tensor.data));
  }

  addNode(
    opType: string,
    inputs: string[],
    outputs: string[],
    attributes: Record<string, AttributeValue> = {},
  ): void {
    this.nodes.push({
      opType,
      name: outputs[0],
      input: inputs,
      output: outputs,
      attribute: Object.entries(attributes).map(([name, value]) => attribute(name, value)),
    });
  }

  /** Convenience: a node with one output named after `base`; returns that output's name. */
  add(
    opType: string,
    inputs: string[],
    base: string,
    attributes: Record<string, AttributeValue> = {},
  ): string {
    const output = this.uniqueName(base);
    this.addNode(opType, inputs, [output], attributes);
    return output;
  }

  encode(producer: string, metadata: Record<string, string>): Uint8Array {
    const model = onnx.ModelProto.create({
      irVersion: IR_VERSION,
      producerName: producer,
      opsetImport: [{ domain: '', version: OPSET_VERSION }],
      metadataProps: Object.entries(metadata).map(([key, value]) => ({ key, value })),
      graph: {
        name: producer,
        node: this.nodes,
        initializer: this.initializers,
        input: this.inputs,
        output: this.outputs,
      },
    });
    return onnx.ModelProto.encode(model).finish();
  }

  private addInitializer(name: string, shape: number[], dataType: number, rawData: Uint8Array): string {
    if (this.initializerNames.has(name)) throw new Error(`initializer ${name} added twice`);
    this.initializerNames.add(name);
    // Copy: rawData may view a buffer that is reused by the caller.
    this.initializers.push({ name, dims: shape, dataType, rawData: Uint8Array.from(rawData) });
    return name;
  }
}

function valueInfo({ name, shape }: ValueInfo): onnxProto.onnx.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType: onnx.TensorProto.DataType.FLOAT,
        shape: {
          dim: shape.map((size) => (typeof size === 'string' ? { dimParam: size } : { dimValue: size })),
        },
      },
    },
  };
}

function attribute(name: string, value: AttributeValue): onnxProto.onnx.IAttributeProto {
  const types = onnx.AttributeProto.AttributeType;
  if (typeof value === 'number') return { name, type: types.INT, i: value };
  if (typeof value === 'string') return { name, type: types.STRING, s: new TextEncoder().encode(value) };
  if (Array.isArray(value)) return { name, type: types.INTS, ints: value };
  if ('float' in value) return { name, type: types.FLOAT, f: value.float };
  return { name, type: types.FLOATS, floats: value.floats };
}
