/**
 * Regional descriptors of a query image (lib/vision/regional.ts) on the free-size block-16 graph
 * (REGIONAL_SPEC): one pass over the image at 448 px on its long side, which also multiplies each cell by
 * the window projection (the matrix it is constructed with); every 3/5/7-cell window of the map is then
 * pooled and projected into the embedder's (projected) vector space.
 */
import type { RegionalEmbedder } from '#lib/ports.ts';
import { memoised } from '#lib/memoised.ts';
import { openImage, rgbFilled, writeRgbUnit } from '#lib/vision/image-input.ts';
import { REGIONAL_SPEC } from '#lib/vision/model-specs.ts';
import { floatTensor, outputData, type InferenceSession } from '#lib/vision/onnx-session.ts';
import type { Projection } from '#lib/vision/projection.ts';
import {
  projectionInput,
  regionalRasterSize,
  regionalVectors,
  type FeatureMap,
} from '#lib/vision/regional.ts';

export class OnnxRegionalEmbedder implements RegionalEmbedder {
  /** The window projection's matrix as the graph's second input (Wᵀ), built once. */
  private readonly projectionTensor;
  /** The graph's session, created on first use and again after a failed creation. */
  private readonly loaded = memoised(() => this.openSession());

  /**
   * @param openSession creates the graph's session; called on the first `regions` (and again after a
   *   failed creation), so a process that never searches by image never loads it
   */
  constructor(
    private readonly openSession: () => Promise<InferenceSession>,
    private readonly projection: Projection,
  ) {
    this.projectionTensor = floatTensor(projectionInput(projection), [projection.inDim, projection.outDim]);
  }

  /** Encoded image → its regions' vectors. Throws InvalidImageError on undecodable input. */
  async regions(image: Buffer): Promise<Float32Array[]> {
    return regionalVectors((await this.featureMap(image)).map, this.projection);
  }

  /**
   * Encoded image → its block-16 map (and the oriented image's size, whose pixels the map's cells cover):
   * the input of `regions`, also read by the training of the window projection (layers/projection/).
   */
  async featureMap(image: Buffer): Promise<{ map: FeatureMap; width: number; height: number }> {
    const oriented = await openImage(image);
    const size = regionalRasterSize(oriented.width, oriented.height);
    const rgb = await rgbFilled(oriented.pipeline.clone(), size.width, size.height);
    const input = new Float32Array(size.width * size.height * 3);
    writeRgbUnit(rgb, input, 0);
    const session = await this.loaded();
    const outputs = await session.run({
      [REGIONAL_SPEC.inputName]: floatTensor(input, [1, size.height, size.width, 3]),
      [REGIONAL_SPEC.projectionInputName]: this.projectionTensor,
    });
    const [, rows = 0, cols = 0, channels = 0] = outputs[REGIONAL_SPEC.outputName]?.dims ?? [];
    return {
      map: {
        rows,
        cols,
        channels,
        data: outputData(outputs, REGIONAL_SPEC.outputName),
        projected: outputData(outputs, REGIONAL_SPEC.projectedOutputName),
      },
      width: oriented.width,
      height: oriented.height,
    };
  }
}
