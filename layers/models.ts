/**
 * The recipes of the model layer: for each model, its pinned source and how its TF graph is cut and
 * renamed into the ONNX graph the run time expects (names and shapes from lib/vision/model-specs.ts).
 */
import { DETECTOR_SPEC, EMBEDDER_SPEC, REGIONAL_SPEC } from '#lib/vision/model-specs.ts';
import type { ConversionSpec } from './convert/tf-to-onnx.ts';
import {
  HUMAN_MODELS_SOURCE,
  loadNanoDet,
  loadNsfwjsMobileNetV2Mid,
  NSFWJS_SOURCE,
  type LoadedSource,
} from './sources.ts';

export interface ModelRecipe {
  name: string;
  file: string;
  source: { package: string; version: string; integrity?: string; licence: string };
  load(root: string): LoadedSource;
  conversion: Omit<ConversionSpec, 'producer' | 'metadata'>;
  preprocessing: string;
  embeddingDimension?: number;
  labels?: readonly string[];
  /**
   * Path (from the repository root) of the committed activation ranges (layers/calibration/): when set,
   * the build quantises the graph to 8 bits with them (ConversionSpec.quantization).
   */
  calibration?: string;
}

const MOBILENET_PREFIX =
  'StatefulPartitionedCall/sequential/keras_layer/StatefulPartitionedCall/StatefulPartitionedCall/StatefulPartitionedCall/predict/MobilenetV2';

export const EMBEDDER_RECIPE: ModelRecipe = {
  name: EMBEDDER_SPEC.name,
  file: EMBEDDER_SPEC.file,
  source: { package: NSFWJS_SOURCE.package, version: NSFWJS_SOURCE.version, licence: NSFWJS_SOURCE.licence },
  load: loadNsfwjsMobileNetV2Mid,
  conversion: {
    placeholder: 'input',
    inputName: EMBEDDER_SPEC.inputName,
    inputShape: ['batch', EMBEDDER_SPEC.inputSize, EMBEDDER_SPEC.inputSize, 3],
    outputs: [
      {
        name: EMBEDDER_SPEC.outputName,
        tensor: `${MOBILENET_PREFIX}/expanded_conv_16/project/BatchNorm/FusedBatchNormV3`,
        reduce: 'spatial-mean',
        shape: ['batch', EMBEDDER_SPEC.dimension],
      },
    ],
  },
  preprocessing: EMBEDDER_SPEC.preprocessing,
  embeddingDimension: EMBEDDER_SPEC.dimension,
};

/** The embedder's graph with a free spatial size, returning the block-16 map unpooled (regional matching). */
export const REGIONAL_RECIPE: ModelRecipe = {
  ...EMBEDDER_RECIPE,
  name: REGIONAL_SPEC.name,
  file: REGIONAL_SPEC.file,
  conversion: {
    ...EMBEDDER_RECIPE.conversion,
    inputShape: ['batch', 'height', 'width', 3],
    outputs: [
      {
        name: REGIONAL_SPEC.outputName,
        tensor: `${MOBILENET_PREFIX}/expanded_conv_16/project/BatchNorm/FusedBatchNormV3`,
        shape: ['batch', 'cells_y', 'cells_x', REGIONAL_SPEC.channels],
      },
      {
        name: REGIONAL_SPEC.projectedOutputName,
        tensor: `${MOBILENET_PREFIX}/expanded_conv_16/project/BatchNorm/FusedBatchNormV3`,
        times: { input: REGIONAL_SPEC.projectionInputName, shape: [REGIONAL_SPEC.channels, 'projected'] },
        shape: ['batch', 'cells_y', 'cells_x', 'projected'],
      },
    ],
  },
  preprocessing: REGIONAL_SPEC.preprocessing,
  // Quantised: the regional pass is the longest model run of a search (448 px, ~3× the embedder's
  // pixels), and integer kernels run it ~2.5× faster, retrieval within a few queries of the float graph
  // (docs/vision.md, docs/quality.md). The embedder stays float: its bytes version every stored vector
  // and the learned projection.
  calibration: 'layers/calibration/regional-ranges.json',
};

/** NanoDet's TF graph names its six outputs Identity…Identity_5: class maps first, then box distributions. */
const NANODET_OUTPUTS = [
  { name: DETECTOR_SPEC.classOutputs[0], tensor: 'Identity', cells: 2704, channels: 80 },
  { name: DETECTOR_SPEC.classOutputs[1], tensor: 'Identity_1', cells: 676, channels: 80 },
  { name: DETECTOR_SPEC.classOutputs[2], tensor: 'Identity_2', cells: 169, channels: 80 },
  { name: DETECTOR_SPEC.boxOutputs[0], tensor: 'Identity_3', cells: 2704, channels: 44 },
  { name: DETECTOR_SPEC.boxOutputs[1], tensor: 'Identity_4', cells: 676, channels: 44 },
  { name: DETECTOR_SPEC.boxOutputs[2], tensor: 'Identity_5', cells: 169, channels: 44 },
];

export const DETECTOR_RECIPE: ModelRecipe = {
  name: DETECTOR_SPEC.name,
  file: DETECTOR_SPEC.file,
  source: {
    package: HUMAN_MODELS_SOURCE.package,
    version: HUMAN_MODELS_SOURCE.version,
    integrity: HUMAN_MODELS_SOURCE.integrity,
    licence: HUMAN_MODELS_SOURCE.licence,
  },
  load: loadNanoDet,
  conversion: {
    placeholder: 'input_1',
    inputName: DETECTOR_SPEC.inputName,
    inputShape: [1, 3, DETECTOR_SPEC.inputSize, DETECTOR_SPEC.inputSize],
    outputs: NANODET_OUTPUTS.map(({ name, tensor, cells, channels }) => ({
      name,
      tensor,
      shape: [1, cells, channels],
    })),
  },
  preprocessing: DETECTOR_SPEC.preprocessing,
  labels: DETECTOR_SPEC.labels,
};

export const RECIPES: readonly ModelRecipe[] = [EMBEDDER_RECIPE, REGIONAL_RECIPE, DETECTOR_RECIPE];
