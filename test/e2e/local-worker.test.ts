import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { extractLocalFeatures } from '#lib/vision/local-features/index.ts';
import { startTestStack } from '#test/support/local-stack.ts';

/**
 * Local mode's extraction worker (lib/local/worker-bundle.ts): the stack runs it from a bundle it builds
 * at start, starts it with the stack and stops it with the stack.
 */
const DINNER = readFileSync(join(import.meta.dirname, '../fixtures/vision/voc-dinner.jpg'));

describe('the local stack’s extraction worker', () => {
  it('runs from the bundle, gives the JS thread’s features, and stops with the stack', async () => {
    // Prepare
    const stack = await startTestStack({ DEMO_SEED: 'false' });
    let stopped = false;
    try {
      const matcher = await stack.container.ingest.localFeatures!.matcher();
      // Act
      const features = await matcher.extract(DINNER, 'query');
      await stack.stop();
      stopped = true;
      // Assess
      expect(stack.config.search.localFeatureWorkers).toBe(1);
      expect(stack.config.search.localFeatureWorkerEntry).toMatch(/extract-worker-[0-9a-f]{16}\.mjs$/);
      const inThread = await extractLocalFeatures(DINNER, { role: 'query' });
      const bytes = ({ descriptors: d }: typeof inThread.original) =>
        Buffer.from(d.buffer, d.byteOffset, d.byteLength);
      expect(bytes(features.original)).toEqual(bytes(inThread.original));
      await expect(matcher.extract(DINNER, 'query')).rejects.toThrow(/closed/);
    } finally {
      if (!stopped) await stack.stop();
    }
  }, 60_000);
});
