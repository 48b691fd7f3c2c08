import { decodeImageData } from '#lib/domain/image-data.ts';
import { imageSearchItem } from '#lib/domain/products.ts';
import { SearchImageRequest } from '#lib/domain/schemas.ts';
import { searchByImage } from '#lib/domain/search.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { publicEndpoint } from '#lib/http/middleware.ts';
import { ok } from '#lib/http/responses.ts';

/** POST /api/v1/search/image: catalogue products that look like the image. */
export const handler = publicEndpoint(
  { endpoint: 'search_image', idField: 'searchId' },
  async (event, context, c) => {
    const input = parseInput(SearchImageRequest, event.body);
    const feedId = context.state.auth!.feed.feedId;
    const hits = await searchByImage(c, {
      feedId,
      image: decodeImageData(input.imageData),
      limit: input.limit,
      offset: input.offset,
    });
    return ok(hits.map(imageSearchItem));
  },
);
