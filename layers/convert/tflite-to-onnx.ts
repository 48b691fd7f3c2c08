/**
 * Converts a TensorFlow Lite convolutional graph (read by tflite-model.ts) into an ONNX opset-13 model.
 *
 * Layout: TFLite is NHWC; the ONNX graph takes an NCHW input and keeps image tensors NCHW, so convolutions
 * need no Transpose pairs. A RESHAPE or CONCATENATION reads its input in TFLite's NHWC order, so an image
 * tensor is transposed back to NHWC before it (once per tensor), and what comes out of them is "plain":
 * the same element order as TFLite. Constant inputs (DEQUANTIZE of float16 weights included) are folded
 * into initialisers.
 */
import { OnnxGraphBuilder } from './onnx-builder.ts';
import type { HostTensor } from './tfjs-graph.ts';
import type { TfliteActivation, TfliteModel, TfliteOperator } from './tflite-model.ts';

const NCHW_FROM_NHWC = [0, 3, 1, 2];
const NHWC_FROM_NCHW = [0, 2, 3, 1];

export interface TfliteConversionSpec {
  producer: string;
  metadata: Record<string, string>;
  /** The ONNX input's name; its shape is the TFLite input's, in NCHW order. */
  inputName: string;
  /** ONNX output names, in the order of the TFLite graph's outputs. */
  outputNames: string[];
}

interface Value {
  name: string;
  layout: 'nchw' | 'plain';
  /** The NHWC copy of an NCHW tensor, made once when a layout-sensitive operator reads it. */
  nhwc?: string;
}

class TfliteConverter {
  private readonly builder = new OnnxGraphBuilder();
  private readonly values = new Map<number, Value>();
  private readonly constants = new Map<number, HostTensor>();

  constructor(
    private readonly model: TfliteModel,
    private readonly spec: TfliteConversionSpec,
  ) {
    model.tensors.forEach((tensor, index) => {
      if (tensor.constant) this.constants.set(index, tensor.constant);
    });
  }

  run(): Uint8Array {
    const { model, spec, builder } = this;
    const [input, ...moreInputs] = model.inputs;
    if (input === undefined || moreInputs.length) throw new Error('expected exactly one input');
    const inputShape = model.tensors[input]!.shape;
    if (inputShape.length !== 4) throw new Error(`input shape ${inputShape.join('×')} is not NHWC`);
    builder.addInput({ name: spec.inputName, shape: NCHW_FROM_NHWC.map((axis) => inputShape[axis]!) });
    this.values.set(input, { name: spec.inputName, layout: 'nchw' });
    for (const operator of model.operators) this.convert(operator);
    if (model.outputs.length !== spec.outputNames.length) {
      throw new Error(`the graph has ${model.outputs.length} outputs, ${spec.outputNames.length} named`);
    }
    model.outputs.forEach((index, position) => {
      const name = spec.outputNames[position]!;
      builder.addNode('Identity', [this.plain(index)], [name]);
      builder.addOutput({ name, shape: model.tensors[index]!.shape });
    });
    return builder.encode(spec.producer, spec.metadata);
  }

  private convert(operator: TfliteOperator): void {
    const output = operator.outputs[0]!;
    const name = this.model.tensors[output]!.name;
    switch (operator.type) {
      case 'DEQUANTIZE': {
        // Float16 weights: already decoded to float32 by the reader, so the output is the same constant.
        const constant = this.constants.get(operator.inputs[0]!);
        if (!constant) throw new Error(`${name}: DEQUANTIZE of a non-constant tensor is not supported`);
        this.constants.set(output, constant);
        return;
      }
      case 'CONV_2D':
      case 'DEPTHWISE_CONV_2D':
        this.set(output, this.convolution(operator, name), 'nchw');
        return;
      case 'ADD': {
        const [left, right] = operator.inputs.map((index) => this.value(index));
        if (left!.layout !== right!.layout) throw new Error(`${name}: ADD of mixed layouts`);
        const sum = this.builder.add('Add', [left!.name, right!.name], name);
        this.set(output, this.activate(sum, operator.activation ?? 'none', name), left!.layout);
        return;
      }
      case 'LOGISTIC': {
        const value = this.value(operator.inputs[0]!);
        this.set(output, this.builder.add('Sigmoid', [value.name], name), value.layout);
        return;
      }
      case 'RESHAPE': {
        const shape = this.model.tensors[output]!.shape;
        const target = this.builder.addInt64Initializer(
          this.builder.uniqueName(`${name}/shape`),
          [shape.length],
          shape,
        );
        this.set(
          output,
          this.builder.add('Reshape', [this.plain(operator.inputs[0]!), target], name),
          'plain',
        );
        return;
      }
      case 'CONCATENATION': {
        const rank = this.model.tensors[output]!.shape.length;
        const axis = (operator.axis ?? 0) < 0 ? (operator.axis ?? 0) + rank : (operator.axis ?? 0);
        const inputs = operator.inputs.map((index) => this.plain(index));
        const joined = this.builder.add('Concat', inputs, name, { axis });
        this.set(output, this.activate(joined, operator.activation ?? 'none', name), 'plain');
        return;
      }
      default:
        throw new Error(`${name}: operator ${operator.type} is not supported`);
    }
  }

  private convolution(operator: TfliteOperator, name: string): string {
    const [inputIndex, filterIndex, biasIndex] = operator.inputs;
    const input = this.value(inputIndex!);
    if (input.layout !== 'nchw') throw new Error(`${name}: convolution of a reshaped tensor`);
    const filter = this.constant(filterIndex!, name);
    const [first, height, width, last] = filter.shape as [number, number, number, number];
    const depthwise = operator.type === 'DEPTHWISE_CONV_2D';
    // CONV_2D filters are [out, h, w, in] and DEPTHWISE_CONV_2D ones [1, h, w, channels]; ONNX wants
    // [out, in / group, h, w].
    const outputs = depthwise ? last : first;
    const perChannel = depthwise ? 1 : last;
    const weights = new Float32Array(filter.data.length);
    for (let o = 0; o < outputs; o += 1)
      for (let y = 0; y < height; y += 1)
        for (let x = 0; x < width; x += 1)
          for (let i = 0; i < perChannel; i += 1) {
            const from = depthwise ? (y * width + x) * last + o : ((o * height + y) * width + x) * last + i;
            weights[((o * perChannel + i) * height + y) * width + x] = filter.data[from]!;
          }
    const inputs = [
      input.name,
      this.builder.addFloatInitializer(
        this.builder.uniqueName(`${name}/weights`),
        [outputs, perChannel, height, width],
        weights,
      ),
    ];
    if (biasIndex !== undefined && biasIndex >= 0) {
      const bias = this.constant(biasIndex, name);
      inputs.push(
        this.builder.addFloatInitializer(
          this.builder.uniqueName(`${name}/bias`),
          bias.shape,
          bias.data as Float32Array,
        ),
      );
    }
    const attributes: Record<string, number | number[] | string> = {
      kernel_shape: [height, width],
      strides: operator.strides ?? [1, 1],
      dilations: operator.dilations ?? [1, 1],
      // TFLite's SAME, like TF's, puts the odd padding pixel at the end: ONNX's SAME_UPPER.
      auto_pad: operator.padding === 'valid' ? 'VALID' : 'SAME_UPPER',
    };
    if (depthwise) attributes['group'] = outputs;
    const convolved = this.builder.add('Conv', inputs, name, attributes);
    return this.activate(convolved, operator.activation ?? 'none', name);
  }

  private activate(input: string, activation: TfliteActivation, name: string): string {
    if (activation === 'relu') return this.builder.add('Relu', [input], `${name}/relu`);
    if (activation === 'relu6') {
      const low = this.scalar(0);
      const high = this.scalar(6);
      return this.builder.add('Clip', [input, low, high], `${name}/relu6`);
    }
    return input;
  }

  private scalarNames = new Map<number, string>();

  private scalar(value: number): string {
    let name = this.scalarNames.get(value);
    if (!name) {
      name = this.builder.addFloatInitializer(`scalar_${value}`, [], Float32Array.of(value));
      this.scalarNames.set(value, name);
    }
    return name;
  }

  private set(index: number, name: string, layout: Value['layout']): void {
    this.values.set(index, { name, layout });
  }

  private value(index: number): Value {
    const value = this.values.get(index);
    if (value) return value;
    const constant = this.constants.get(index);
    const tensor = this.model.tensors[index]!;
    if (!constant) throw new Error(`tensor ${tensor.name} is read before it is written`);
    // A constant operand of an elementwise operator: stored as it is (plain layout).
    const name = this.builder.addHostInitializer(this.builder.uniqueName(tensor.name), constant);
    const created: Value = { name, layout: 'plain' };
    this.values.set(index, created);
    return created;
  }

  /** The tensor in TFLite's own element order (NHWC for images). */
  private plain(index: number): string {
    const value = this.value(index);
    if (value.layout === 'plain') return value.name;
    value.nhwc ??= this.builder.add('Transpose', [value.name], `${this.model.tensors[index]!.name}/nhwc`, {
      perm: NHWC_FROM_NCHW,
    });
    return value.nhwc;
  }

  private constant(index: number, where: string): HostTensor {
    const constant = this.constants.get(index);
    if (!constant) throw new Error(`${where}: input ${this.model.tensors[index]!.name} is not constant`);
    return constant;
  }
}

export function convertTfliteModel(model: TfliteModel, spec: TfliteConversionSpec): Uint8Array {
  return new TfliteConverter(model, spec).run();
}
