/**
 * Worker-thread entry of `ExtractionPool` (extract-pool.ts): extracts the local features of each image it
 * is sent, on this thread's own OpenCV instance, and sends them back with their buffers transferred; and
 * verifies the candidates it is sent against a query (verify.ts), for a search that splits its shortlist
 * between this thread and its own.
 */
import { parentPort } from 'node:worker_threads';
import { InvalidImageError } from '#lib/domain/errors.ts';
import type { Box } from '#lib/vision/image-input.ts';
import { extractLocalFeatures, type FeatureRole } from '#lib/vision/local-features/extract.ts';
import { loadOpenCv } from '#lib/vision/local-features/opencv.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';
import { inlierCounts } from '#lib/vision/local-features/verify.ts';

export interface ExtractRequest {
  id: number;
  image: Uint8Array;
  role: FeatureRole;
  region?: Box;
}

export interface VerifyRequest {
  id: number;
  query: LocalFeatures;
  candidates: (LocalFeatures | undefined)[];
}

const port = parentPort;
if (!port) throw new Error('extract-worker.ts runs as a worker thread of ExtractionPool');

// OpenCV loads while the process is still starting, not on the first image it is sent (~0.4 s from a
// bundle); a failed load is the first extraction's error, as before.
loadOpenCv().catch(() => undefined);

/**
 * Answers request `id` with its error's name and message, and a refused image's refusal (an Error does
 * not cross the thread as itself).
 */
const replyError = (id: number, error: unknown): void => {
  const { name, message } = error instanceof Error ? error : new Error(String(error));
  const refusal = error instanceof InvalidImageError ? { refusal: error.refusal } : {};
  port.postMessage({ id, error: { name, message, ...refusal } });
};

port.on('message', (request: ExtractRequest | VerifyRequest) => {
  if ('candidates' in request) {
    const { id, query, candidates } = request;
    try {
      port.postMessage({ id, inliers: inlierCounts(query, candidates) });
    } catch (error) {
      replyError(id, error);
    }
    return;
  }
  const { id, image, role, region } = request;
  const options = region ? { role, region } : { role };
  extractLocalFeatures(Buffer.from(image.buffer, image.byteOffset, image.byteLength), options).then(
    (features) => {
      const sets = features.mirrored ? [features.original, features.mirrored] : [features.original];
      port.postMessage(
        { id, features },
        sets.flatMap((set) => [set.points.buffer as ArrayBuffer, set.descriptors.buffer as ArrayBuffer]),
      );
    },
    (error: unknown) => replyError(id, error),
  );
});
