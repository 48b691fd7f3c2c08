import { createKey as create, listKeys as list, revokeKey as revoke } from '#lib/domain/admin/keys.ts';
import { CreateKeyRequest } from '#lib/domain/admin/schemas.ts';
import { parseInput } from '#lib/domain/validation.ts';
import { adminEndpoint } from '#lib/http/middleware.ts';
import { created, ok } from '#lib/http/responses.ts';

/** POST /admin/v1/feeds/{feedId}/keys */
export const createKey = adminEndpoint(async (event, _ctx, c) =>
  created(
    await create(c, event.pathParameters?.feedId ?? '', parseInput(CreateKeyRequest, event.body ?? {})),
  ),
);

/** GET /admin/v1/feeds/{feedId}/keys */
export const listKeys = adminEndpoint(async (event, _ctx, c) =>
  ok({ keys: await list(c, event.pathParameters?.feedId ?? '') }),
);

/** DELETE /admin/v1/keys/{searchId}: revokes (the id then answers 403, not 401). */
export const revokeKey = adminEndpoint(async (event, _ctx, c) =>
  ok(await revoke(c, event.pathParameters?.searchId ?? '')),
);
