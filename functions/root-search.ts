import { decodeImageData } from '#lib/domain/image-data.ts';
import { rootSearchItem } from '#lib/domain/products.ts';
import { RootSearchRequest } from '#lib/domain/schemas.ts';
import { searchByImage } from '#lib/domain/search.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { publicEndpoint } from '#lib/http/middleware.ts';
import { ok } from '#lib/http/responses.ts';

/** POST / (root search): the simpler search form, addressed by feedId, limit/offset possibly strings. */
export const handler = publicEndpoint(
  { endpoint: 'root_search', idField: 'feedId' },
  async (event, context, c) => {
    const input = parseInput(RootSearchRequest, event.body);
    const feedId = context.state.auth!.feed.feedId;
    const image = decodeImageData(input.imageData);
    const hits = await searchByImage(c, {
      feedId,
      image,
      limit: Number(input.limit),
      offset: Number(input.offset),
    });
    return ok(hits.map(rootSearchItem));
  },
);
