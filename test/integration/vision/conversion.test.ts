/**
 * The converted ONNX graphs must compute what the TF.js originals compute. The oracle is TF.js itself on
 * its pure-JS CPU backend (slow, ~10 s for both models, but independent of our converter), fed the same
 * preprocessed real photo as onnxruntime.
 */
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { DETECTOR_RECIPE, EMBEDDER_RECIPE, type ModelRecipe } from '#layers/models.ts';
import {
  openImage,
  rgbLetterbox,
  rgbSquares,
  rgbToNormalisedBgrPlanes,
  writeRgbUnit,
} from '#lib/vision/image-input.ts';
import { DETECTOR_SPEC, EMBEDDER_SPEC } from '#lib/vision/model-specs.ts';
import { createSession, floatTensor, outputData } from '#lib/vision/onnx-session.ts';
import { ensureModels, fixture, MODEL_DIR } from './vision-fixture.ts';

const ROOT = join(import.meta.dirname, '../../..');

async function referenceModel(recipe: ModelRecipe): Promise<tf.GraphModel> {
  const source = recipe.load(ROOT);
  return tf.loadGraphModel(
    tf.io.fromMemory({
      modelTopology: source.model.modelTopology as unknown as object,
      weightSpecs: source.model.weightsManifest.flatMap(
        (group) => group.weights,
      ) as tf.io.WeightsManifestEntry[],
      weightData: new Uint8Array(source.weightBytes).buffer,
    }),
  );
}

/** Largest absolute difference, relative to the largest magnitude of the reference. */
function relativeError(actual: Float32Array, expected: Float32Array): number {
  let difference = 0;
  let magnitude = 0;
  for (let i = 0; i < expected.length; i += 1) {
    difference = Math.max(difference, Math.abs(actual[i]! - expected[i]!));
    magnitude = Math.max(magnitude, Math.abs(expected[i]!));
  }
  return difference / magnitude;
}

describe('TF.js → ONNX conversion', () => {
  beforeAll(async () => {
    ensureModels();
    await tf.setBackend('cpu');
  });

  it('reproduces the MobileNetV2 block-16 features of a real photo', async () => {
    // Prepare
    const size = EMBEDDER_SPEC.inputSize;
    const [rgb] = await rgbSquares(await openImage(fixture('voc-dinner.jpg')), size, [undefined]);
    const input = new Float32Array(size * size * 3);
    writeRgbUnit(rgb!, input, 0);
    const reference = await referenceModel(EMBEDDER_RECIPE);
    const session = await createSession(join(MODEL_DIR, EMBEDDER_SPEC.file));

    // Act
    const blockOutput = reference.execute(
      tf.tensor4d(input, [1, size, size, 3]),
      EMBEDDER_RECIPE.conversion.outputs[0]!.tensor,
    ) as tf.Tensor;
    const expected = (await blockOutput.mean([1, 2]).data()) as Float32Array;
    const outputs = await session.run({ [EMBEDDER_SPEC.inputName]: floatTensor(input, [1, size, size, 3]) });
    const actual = outputData(outputs, EMBEDDER_SPEC.outputName);

    // Assess
    expect(actual).toHaveLength(EMBEDDER_SPEC.dimension);
    expect(relativeError(actual, expected)).toBeLessThan(1e-4);
  }, 60_000);

  it('reproduces all six NanoDet head outputs on a real photo', async () => {
    // Prepare
    const size = DETECTOR_SPEC.inputSize;
    const { rgb } = await rgbLetterbox(await openImage(fixture('voc-dinner.jpg')), size, {
      r: 124,
      g: 116,
      b: 104,
    });
    const input = rgbToNormalisedBgrPlanes(rgb, DETECTOR_SPEC.meanBgr, DETECTOR_SPEC.stdBgr);
    const reference = await referenceModel(DETECTOR_RECIPE);
    const session = await createSession(join(MODEL_DIR, DETECTOR_SPEC.file));
    const outputSpecs = DETECTOR_RECIPE.conversion.outputs;

    // Act
    const expected = reference.execute(
      tf.tensor4d(input, [1, 3, size, size]),
      outputSpecs.map(({ tensor }) => tensor),
    ) as tf.Tensor[];
    const actual = await session.run({ [DETECTOR_SPEC.inputName]: floatTensor(input, [1, 3, size, size]) });

    // Assess
    for (const [i, { name, shape }] of outputSpecs.entries()) {
      expect(expected[i]!.shape).toEqual(shape);
      expect(
        relativeError(outputData(actual, name), (await expected[i]!.data()) as Float32Array),
        name,
      ).toBeLessThan(1e-4);
    }
  }, 60_000);
});
