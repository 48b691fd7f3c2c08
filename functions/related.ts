import { decodeImageData } from '#lib/domain/image-data.ts';
import { relatedItem } from '#lib/domain/products.ts';
import { RelatedRequest } from '#lib/domain/schemas.ts';
import { usageContextOf } from '#lib/domain/admin/usage.ts';
import { relatedProducts } from '#lib/domain/search.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { publicEndpoint } from '#lib/http/middleware.ts';
import { ok } from '#lib/http/responses.ts';

/** POST /api/v1/related: products related to a customer product id or an image. */
export const handler = publicEndpoint(
  { endpoint: 'related', idField: 'searchId' },
  async (event, context, c) => {
    const input = parseInput(RelatedRequest, event.body);
    context.state.usageContext = usageContextOf(input.context);
    const hits = await relatedProducts(c, {
      feedId: context.state.auth!.feed.feedId,
      productId: input.productId,
      image: input.imageData === undefined ? undefined : decodeImageData(input.imageData),
      fallback: input.fallback === undefined ? undefined : decodeImageData(input.fallback, 'fallback'),
      limit: input.limit,
      offset: input.offset,
      filters: input.filters,
      context: input.context,
    });
    return ok(hits.map(relatedItem));
  },
);
