import { listProducts as list } from '#lib/domain/catalogue/browse.ts';
import { ProductsPageQuery } from '#lib/domain/catalogue/imports.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { adminEndpoint } from '#lib/http/middleware.ts';
import { ok } from '#lib/http/responses.ts';

/** GET /admin/v1/feeds/{feedId}/products?limit&cursor */
export const listProducts = adminEndpoint(
  async (event, _ctx, c) =>
    ok(
      await list(
        c,
        event.pathParameters?.feedId ?? '',
        parseInput(ProductsPageQuery, event.queryStringParameters ?? {}, '(query)'),
      ),
    ),
  { takesQuery: true },
);
