/**
 * The shipped projection weights (the projection and the window projection) are reproducible from the
 * committed script, link by link:
 * - pinned Debian packages → seeded views → frozen features (view rows from the embedder, window rows from
 *   the regional graph): every 16th object's rows are re-extracted from the packages and must equal the
 *   committed training features (layers/projection/training-set/) bit for bit;
 * - committed features → PCA-whitening start → InfoNCE refinement, then the window projection from the
 *   window rows: re-trained, both must equal layers/projection/weights/ byte for byte.
 *
 * The features of all 6,858 views and 4,572 windows take 8–10 min to extract on 2 cores (500–602 s,
 * docs/vision.md), more than the rest of npm test together; this file takes ~100 s with the packages
 * unpacked (the sample, 72 objects, 432 views and 288 windows, ~27 s; training both matrices ~75 s).
 * The full chain is `npm run train:projection -- --no-cache --check`, or this file with
 * PROJECTION_REEXTRACT=1 (which re-trains from freshly extracted features instead of the committed ones).
 *
 * The regional graph's activation ranges come from the same packages: calibration.test.ts, in parallel
 * (layers/projection/fetch.ts makes one of the two fetch them while the other waits).
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  committedWeights,
  committedWindowWeights,
  trainingModels,
  trainShippedProjection,
} from '#layers/projection/cli.ts';
import {
  committedFeatures,
  featuresKey,
  featuresSha256,
  PROJECTION_RECIPE,
  sampledFeatures,
  trainingFingerprint,
} from '#layers/projection/recipe.ts';
import { TRAIN_PACKAGES } from '#layers/projection/data.ts';

const SAMPLE_STRIDE = 16;
const reextract = process.env.PROJECTION_REEXTRACT === '1';
/** One set of model sessions for both tests that need them (loaded on first use). */
let models: ReturnType<typeof trainingModels> | undefined;
const sharedModels = () => (models ??= trainingModels());

describe('learned projection training', () => {
  it('records where the shipped weights come from', () => {
    const committed = committedWeights();
    expect(committed).toBeDefined();
    const { manifest, bytes } = committed!;
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(manifest.sha256);
    expect(manifest.bytes).toBe(bytes.length);
    expect(manifest.training.seed).toBe(PROJECTION_RECIPE.seed);
    expect(manifest.training.recipe).toEqual(PROJECTION_RECIPE);
    expect(manifest.training.dataSources).toEqual(TRAIN_PACKAGES);
    // The training code has not changed since the weights were trained.
    expect(manifest.training.fingerprint).toBe(trainingFingerprint());

    const windows = committedWindowWeights();
    expect(windows).toBeDefined();
    expect(createHash('sha256').update(windows!.bytes).digest('hex')).toBe(windows!.manifest.sha256);
    expect(windows!.manifest.bytes).toBe(windows!.bytes.length);
    // Trained against these weights' catalogue vectors, on the same features.
    expect(windows!.manifest.projectionSha256).toBe(manifest.sha256);
    expect(windows!.manifest.embedderSha256).toBe(manifest.embedderSha256);
    expect(windows!.manifest.training.recipe).toEqual(PROJECTION_RECIPE.window);
    expect(windows!.manifest.training.featuresSha256).toBe(manifest.training.featuresSha256);
    expect(windows!.manifest.training.fingerprint).toBe(trainingFingerprint());
  });

  it('commits the features the weights were trained on, extracted by the current code', () => {
    const { manifest } = committedWeights()!;
    const features = committedFeatures();
    expect(features).toBeDefined();
    expect(featuresSha256(features!.set)).toBe(manifest.training.featuresSha256);
    const windowRows = features!.set.kinds.filter((kind) => kind === 'window').length;
    expect(features!.set.kinds.length - windowRows).toBe(manifest.training.views);
    expect(windowRows).toBe(committedWindowWeights()!.manifest.training.windows);
    expect(features!.set.objectNames.length).toBe(manifest.training.objects);
    // Their key covers the view, window and data code, seed, packages, both models and sharp: a change to
    // any of them needs `npm run train:projection` (re-extraction) before they count as the script's output.
    expect(features!.key).toBe(
      featuresKey(PROJECTION_RECIPE, {
        embedderSha256: manifest.embedderSha256,
        regionalSha256: committedWindowWeights()!.manifest.regionalSha256,
      }),
    );
  });

  it.skipIf(reextract)(
    're-extracts the committed features of a sample of objects, bit for bit',
    async () => {
      const loaded = await sharedModels();
      expect(loaded.embedderSha256).toBe(committedWeights()!.manifest.embedderSha256);
      expect(loaded.regionalSha256).toBe(committedWindowWeights()!.manifest.regionalSha256);
      const { extracted, committedRows } = await sampledFeatures(
        PROJECTION_RECIPE,
        loaded,
        committedFeatures()!.set,
        SAMPLE_STRIDE,
      );
      expect(extracted.objectNames).toEqual(committedRows.objectNames);
      expect(extracted.objects).toEqual(committedRows.objects);
      expect(extracted.kinds).toEqual(committedRows.kinds);
      expect(extracted.kinds.length).toBeGreaterThan(400);
      // The first differing value's position, rather than a diff of 322k numbers.
      const firstDifference = extracted.features.findIndex((value, i) => value !== committedRows.features[i]);
      expect(firstDifference).toBe(-1);
      expect(extracted.features.length).toBe(committedRows.features.length);
    },
    300_000,
  );

  it(
    reextract
      ? 're-extracts every feature and re-trains to the same bytes as the shipped weights'
      : 're-trains from the committed features to the same bytes as the shipped weights',
    async () => {
      const committed = committedWeights()!;
      const result = await trainShippedProjection({ reuse: !reextract, models: await sharedModels() });
      expect(result.reusedFeatures).toBe(!reextract);
      expect(result.manifest.training.featuresSha256).toBe(committed.manifest.training.featuresSha256);
      expect(result.manifest.sha256).toBe(committed.manifest.sha256);
      expect(result.bytes.equals(committed.bytes)).toBe(true);
      expect(result.manifest).toEqual(committed.manifest);
      const windows = committedWindowWeights()!;
      expect(result.window.manifest.sha256).toBe(windows.manifest.sha256);
      expect(result.window.bytes.equals(windows.bytes)).toBe(true);
      expect(result.window.manifest).toEqual(windows.manifest);
    },
    1_200_000,
  );
});
