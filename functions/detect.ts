import { decodeImageData } from '#lib/domain/image-data.ts';
import { DetectRequest } from '#lib/domain/schemas.ts';
import { detectObjects } from '#lib/domain/search.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { publicEndpoint } from '#lib/http/middleware.ts';
import { ok } from '#lib/http/responses.ts';

/** POST /api/v1/detect: objects in the image with boxes, labels and scores. */
export const handler = publicEndpoint({ endpoint: 'detect', idField: 'searchId' }, async (event, context, c) => {
  const started = performance.now();
  const input = parseInput(DetectRequest, event.body);
  const { key, feed } = context.state.auth!;
  const results = await detectObjects(c, {
    feedId: feed.feedId,
    image: decodeImageData(input.imageData),
    search: input.action === 'OD+SEARCH',
    limit: input.limit,
  });
  const processTimeSeconds = Math.round(performance.now() - started) / 1000;
  return ok({ action: input.action, searchId: key.searchId, results, processTimeSeconds });
});
