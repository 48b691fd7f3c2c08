import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { startTestStack } from '#test/support/local-stack.ts';

/** Fault injection: esbuild cannot bundle the worker, so the stack runs its TypeScript entry through tsx. */
vi.mock('#lib/local/worker-bundle.ts', () => ({
  bundleExtractionWorker: () => Promise.reject(new Error('esbuild is not installed')),
}));

const DINNER = readFileSync(join(import.meta.dirname, '../fixtures/vision/voc-dinner.jpg'));

describe('the local stack without a worker bundle', () => {
  it('starts, and extracts through the TypeScript entry', async () => {
    const stack = await startTestStack({ DEMO_SEED: 'false' });
    try {
      expect(stack.config.search.localFeatureWorkers).toBe(1);
      expect(stack.config.search.localFeatureWorkerEntry).toBeUndefined();
      const matcher = await stack.container.ingest.localFeatures!.matcher();
      const features = await matcher.extract(DINNER, 'query');
      expect(features.original.points.length).toBeGreaterThan(100);
    } finally {
      await stack.stop();
    }
  }, 60_000);
});
