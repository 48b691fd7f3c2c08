import { importView, ListImportsQuery, StartImportRequest } from '#lib/domain/catalogue/imports.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { adminEndpoint, type JsonEvent } from '#lib/http/middleware.ts';
import { accepted, ok } from '#lib/http/responses.ts';
import { getImport as get, listImports as list, startImport as start } from '#lib/ingest/start-import.ts';

const feedIdOf = (event: JsonEvent) => event.pathParameters?.feedId ?? '';

/** POST /admin/v1/feeds/{feedId}/imports: {url} or {format, content} → 202 {importId, status} */
export const startImport = adminEndpoint(async (event, _ctx, c) => {
  const record = await start(c, feedIdOf(event), parseInput(StartImportRequest, event.body ?? {}));
  return accepted({ importId: record.importId, status: record.status });
});

/** GET /admin/v1/feeds/{feedId}/imports/{importId} */
export const getImport = adminEndpoint(async (event, _ctx, c) =>
  ok(importView(await get(c, feedIdOf(event), event.pathParameters?.importId ?? ''))),
);

/** GET /admin/v1/feeds/{feedId}/imports?limit&cursor */
export const listImports = adminEndpoint(
  async (event, _ctx, c) => {
    const query = parseInput(ListImportsQuery, event.queryStringParameters ?? {}, '(query)');
    const page = await list(c, feedIdOf(event), query.limit, query.cursor);
    return ok({ imports: page.imports.map(importView), ...(page.cursor ? { cursor: page.cursor } : {}) });
  },
  { takesQuery: true },
);
