/**
 * Worker-thread entry of `ExtractionPool` (extract-pool.ts): extracts the local features of each image it
 * is sent, on this thread's own OpenCV instance, and sends them back with their buffers transferred.
 */
import { parentPort } from 'node:worker_threads';
import type { Box } from '#lib/vision/image-input.ts';
import { extractLocalFeatures, type FeatureRole } from '#lib/vision/local-features/extract.ts';
import { loadOpenCv } from '#lib/vision/local-features/opencv.ts';

export interface ExtractRequest {
  id: number;
  image: Uint8Array;
  role: FeatureRole;
  region?: Box;
}

const port = parentPort;
if (!port) throw new Error('extract-worker.ts runs as a worker thread of ExtractionPool');

// OpenCV loads while the process is still starting, not on the first image it is sent (~0.4 s from a
// bundle); a failed load is the first extraction's error, as before.
loadOpenCv().catch(() => undefined);

port.on('message', ({ id, image, role, region }: ExtractRequest) => {
  const options = region ? { role, region } : { role };
  extractLocalFeatures(Buffer.from(image.buffer, image.byteOffset, image.byteLength), options).then(
    (features) => {
      const sets = features.mirrored ? [features.original, features.mirrored] : [features.original];
      port.postMessage(
        { id, features },
        sets.flatMap((set) => [set.points.buffer as ArrayBuffer, set.descriptors.buffer as ArrayBuffer]),
      );
    },
    (error: unknown) => {
      const { name, message } = error instanceof Error ? error : new Error(String(error));
      port.postMessage({ id, error: { name, message } });
    },
  );
});
