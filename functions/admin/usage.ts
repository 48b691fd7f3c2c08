import { UsageQuery } from '#lib/domain/admin/schemas.ts';
import { usageReport } from '#lib/domain/admin/usage.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { adminEndpoint } from '#lib/http/middleware.ts';
import { ok } from '#lib/http/responses.ts';

/** GET /admin/v1/feeds/{feedId}/usage?from=YYYY-MM-DD&to=YYYY-MM-DD */
export const getUsage = adminEndpoint(
  async (event, _ctx, c) =>
    ok(
      await usageReport(
        c,
        event.pathParameters?.feedId ?? '',
        parseInput(UsageQuery, event.queryStringParameters ?? {}, '(query)'),
      ),
    ),
  { takesQuery: true },
);
