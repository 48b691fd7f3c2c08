import {
  createFeed as create,
  deleteFeed as remove,
  type FeedView,
  feedVersion,
  getFeed as get,
  listFeeds as list,
  updateFeed as update,
} from '#lib/domain/admin/feeds.ts';
import { CreateFeedRequest, UpdateFeedRequest } from '#lib/domain/admin/schemas.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { type Container, feedAdminDeps as deps } from '#lib/container.ts';
import { lastImportOf } from '#lib/domain/catalogue/imports.ts';
import { mapLimit } from '#lib/ingest/concurrency.ts';
import { ifMatchOf } from '#lib/http/conditional.ts';
import { adminEndpoint, type JsonEvent } from '#lib/http/middleware.ts';
import { accepted, created, noContent, ok } from '#lib/http/responses.ts';

const feedIdOf = (event: JsonEvent) => event.pathParameters?.feedId ?? '';
/** A feed's answer carries its version, for a later PATCH's If-Match. */
const etagOf = (feed: FeedView) => ({ ETag: feedVersion(feed) });
/**
 * A feed's import status (its newest import; DESIGN §2), one query. Not part of its version: an import
 * changes no setting a PATCH's If-Match protects. Read before a write, so that a failure of this read
 * cannot turn a change that was made into an error answer (whose retry would make it again).
 */
const lastImportOfFeed = async (c: Container, feedId: string) =>
  lastImportOf((await c.imports.list(feedId, 1))[0]);
const answered = async (c: Container, feed: FeedView) => ({
  ...feed,
  lastImport: await lastImportOfFeed(c, feed.feedId),
});

/**
 * POST /admin/v1/feeds. A new feed has had no import: a feed id is taken again only once the deletion of
 * the feed before it, imports included, is done.
 */
export const createFeed = adminEndpoint(async (event, _ctx, c) => {
  const feed = await create(deps(c), parseInput(CreateFeedRequest, event.body ?? {}));
  return created({ ...feed, lastImport: null }, etagOf(feed));
});

/** GET /admin/v1/feeds */
export const listFeeds = adminEndpoint(async (_event, _ctx, c) =>
  ok({ feeds: await mapLimit(await list(deps(c)), 8, (feed) => answered(c, feed)) }),
);

/** GET /admin/v1/feeds/{feedId} */
export const getFeed = adminEndpoint(async (event, _ctx, c) => {
  const feed = await get(deps(c), feedIdOf(event));
  return ok(await answered(c, feed), etagOf(feed));
});

/** PATCH /admin/v1/feeds/{feedId}: with If-Match, only to the feed at that version (else 412). */
export const updateFeed = adminEndpoint(async (event, _ctx, c) => {
  const ifMatch = ifMatchOf(event);
  const patch = parseInput(UpdateFeedRequest, event.body ?? {});
  const lastImport = await lastImportOfFeed(c, feedIdOf(event));
  const feed = await update(deps(c), feedIdOf(event), patch, ifMatch ? { ifMatch } : {});
  return ok({ ...feed, lastImport }, etagOf(feed));
});

/**
 * DELETE /admin/v1/feeds/{feedId}: 204 once deleted; 202 when the import runner finishes a deletion that
 * outlasts the request (the feed answers 404 from the start either way).
 */
export const deleteFeed = adminEndpoint(async (event, _ctx, c) => {
  const feedId = feedIdOf(event);
  const ifMatch = ifMatchOf(event);
  if ((await remove(deps(c), feedId, ifMatch ? { ifMatch } : {})) === 'deleted') return noContent();
  return accepted({ feedId, status: 'deleting' });
});
