/**
 * The shipped projection weights are reproducible from the committed script: the training recipe is re-run
 * (pinned Debian packages → seeded views → frozen features → PCA-whitening start → InfoNCE refinement) and
 * the result must equal layers/projection/weights/ byte for byte.
 *
 * The frozen features of the training views are cached in .cache/train-data/features-<key>, the key
 * hashing everything that decides them (view and data code, seed, packages, embedder sha256, sharp and
 * libvips versions); the cache is only ever written by the same extraction code, and its content hash must
 * equal the one recorded in the shipped manifest. On a fresh clone the first run downloads ~240 MB of
 * Debian packages and extracts the features of 6,858 views on every core (the whole test: 336 s on a fresh
 * clone of the shared 2-core machine at load average 4–5, docs/vision.md); with the cache it takes
 * 40–70 s (training alone). PROJECTION_REEXTRACT=1 ignores the cache and re-extracts.
 *
 * The regional graph's activation ranges come from the same packages: calibration.test.ts, in parallel
 * (layers/projection/fetch.ts makes one of the two fetch them while the other waits).
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { committedWeights, trainShippedProjection } from '#layers/projection/cli.ts';
import { PROJECTION_RECIPE, trainingFingerprint } from '#layers/projection/recipe.ts';
import { TRAIN_PACKAGES } from '#layers/projection/data.ts';

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
  });

  it('re-trains from the script to the same bytes as the shipped weights', async () => {
    const committed = committedWeights()!;
    const result = await trainShippedProjection({ useCache: process.env.PROJECTION_REEXTRACT !== '1' });
    expect(result.manifest.training.featuresSha256).toBe(committed.manifest.training.featuresSha256);
    expect(result.manifest.sha256).toBe(committed.manifest.sha256);
    expect(result.bytes.equals(committed.bytes)).toBe(true);
    expect(result.manifest).toEqual(committed.manifest);
  }, 1_200_000);
});
