/**
 * Embedder on the converted MobileNetV2-mid graph (onnxruntime): images → 448-d L2-normalised vectors, or,
 * with a learned projection (lib/vision/projection.ts), those vectors projected and re-normalised.
 * Preprocessing: EXIF orientation, alpha on white, squash to 224×224, RGB/255 (see lib/vision/model-specs.ts).
 */
import type { Embedder } from '#lib/ports.ts';
import { openImage, rgbSquares, writeRgbUnit, type Box } from '#lib/vision/image-input.ts';
import { EMBEDDER_SPEC } from '#lib/vision/model-specs.ts';
import { floatTensor, outputData, type InferenceSession } from '#lib/vision/onnx-session.ts';
import { applyProjection, type Projection } from '#lib/vision/projection.ts';

/** Bumped whenever preprocessing changes in a way that changes vectors (the model hash covers the graph). */
const PREPROCESSING_REVISION = 'p1';
/**
 * Images per model run. One: batching buys no throughput on a compute-bound CPU model (docs/benchmarks.md,
 * "Vision layer"), and onnxruntime's memory arena keeps the largest run's activations for the process's
 * life — batches of 16 left the bench process ~400 MB larger (1065–1088 MB RSS against 670 MB) for the
 * same ingestion rate (docs/benchmarks.md, "Memory").
 */
const DEFAULT_BATCH_SIZE = 1;

export function l2Normalise(vector: Float32Array): Float32Array {
  let sum = 0;
  for (const value of vector) sum += value * value;
  const norm = Math.sqrt(sum);
  if (norm > 0) for (let i = 0; i < vector.length; i += 1) vector[i] = vector[i]! / norm;
  return vector;
}

export class OnnxEmbedder implements Embedder {
  readonly dimension: number;
  readonly modelVersion: string;

  /**
   * @param modelSha256 sha256 of the .onnx file (from its manifest); part of the model version.
   * @param projection learned head applied to every vector: it sets the dimension, and its weights' hash
   *   joins the model version (so the import re-embeds a catalogue when it is switched on, off or retrained).
   */
  constructor(
    private readonly session: InferenceSession,
    modelSha256: string,
    private readonly batchSize = DEFAULT_BATCH_SIZE,
    private readonly projection?: Projection,
  ) {
    const base = `${EMBEDDER_SPEC.name}-${modelSha256.slice(0, 8)}-${PREPROCESSING_REVISION}`;
    this.dimension = projection?.outDim ?? EMBEDDER_SPEC.dimension;
    this.modelVersion = projection ? `${base}-proj${projection.outDim}-${projection.version}` : base;
  }

  /** Encoded images (any allowed format) → one vector each, in order. Throws InvalidImageError on bad input. */
  async embed(images: Buffer[]): Promise<Float32Array[]> {
    const squares = await Promise.all(
      images.map(async (bytes) => {
        const [rgb] = await rgbSquares(await openImage(bytes), EMBEDDER_SPEC.inputSize, [undefined]);
        return rgb!;
      }),
    );
    return this.embedSquares(squares);
  }

  /**
   * One vector per box of one image (boxes in oriented-image pixels, as the Detector returns them;
   * `undefined` = the whole image). Decodes the image once; the search pipeline scores the whole query and
   * its detected objects this way.
   */
  async embedRegions(image: Buffer, boxes: readonly (Box | undefined)[]): Promise<Float32Array[]> {
    const squares = await rgbSquares(await openImage(image), EMBEDDER_SPEC.inputSize, boxes);
    return this.embedSquares(squares);
  }

  /** Runs the model on 224×224 RGB squares, batched. */
  private async embedSquares(squares: readonly Buffer[]): Promise<Float32Array[]> {
    const size = EMBEDDER_SPEC.inputSize;
    const pixels = size * size * 3;
    const vectors: Float32Array[] = [];
    for (let start = 0; start < squares.length; start += this.batchSize) {
      const batch = squares.slice(start, start + this.batchSize);
      const input = new Float32Array(batch.length * pixels);
      batch.forEach((rgb, i) => writeRgbUnit(rgb, input, i * pixels));
      const outputs = await this.session.run({
        [EMBEDDER_SPEC.inputName]: floatTensor(input, [batch.length, size, size, 3]),
      });
      const features = outputData(outputs, EMBEDDER_SPEC.outputName);
      const width = EMBEDDER_SPEC.dimension;
      for (let i = 0; i < batch.length; i += 1) {
        const vector = l2Normalise(features.slice(i * width, (i + 1) * width));
        vectors.push(this.projection ? applyProjection(this.projection, vector) : vector);
      }
    }
    return vectors;
  }
}
