import { decodeImageData } from '#lib/domain/image-data.ts';
import { imageSearchItem } from '#lib/domain/products.ts';
import { DetectRequest } from '#lib/domain/schemas.ts';
import { detectObjects } from '#lib/domain/search.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { publicEndpoint } from '#lib/http/middleware.ts';
import { ok } from '#lib/http/responses.ts';

/** POST /api/v1/detect: objects in the image with boxes, labels and scores; OD+SEARCH adds products per object. */
export const handler = publicEndpoint(
  { endpoint: 'detect', idField: 'searchId' },
  async (event, context, c) => {
    const started = performance.now();
    const input = parseInput(DetectRequest, event.body);
    const { key, feed } = context.state.auth!;
    const { objects } = await detectObjects(c, {
      feedId: feed.feedId,
      image: decodeImageData(input.imageData),
      search: input.action === 'OD+SEARCH',
      limit: input.limit,
    });
    const results = {
      objects: objects.map(({ products, ...object }) =>
        products === undefined ? object : { ...object, products: products.map(imageSearchItem) },
      ),
    };
    const processTimeSeconds = Math.round(performance.now() - started) / 1000;
    return ok({ action: input.action, searchId: key.searchId, results, processTimeSeconds });
  },
);
