import { createHash } from 'node:crypto';
import {
  type APIGatewayClient,
  ConflictException,
  CreateApiKeyCommand,
  CreateUsagePlanKeyCommand,
  DeleteApiKeyCommand,
  DeleteUsagePlanKeyCommand,
  GetApiKeysCommand,
  NotFoundException,
} from '@aws-sdk/client-api-gateway';
import type { Feed } from '#lib/domain/feeds.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { ApiKeyRegistry } from '#lib/ports.ts';

/** The gateway usage plan of each feed plan (a search id belongs to the one of its feed's plan). */
export type UsagePlanIds = Record<Feed['plan'], string>;

/**
 * Mirrors search ids into API Gateway: each search id is an API key whose value is the id itself, so the
 * gateway authorizer can hand the Bearer token over as `usageIdentifierKey` and API Gateway meters the
 * request against the key's usage plan (throttle, daily quota).
 *
 * - The key's *name* is a hash of the id (`sid-<24 hex>`): the console and logs never show the id, and a
 *   lookup by name finds the key without listing every key's value.
 * - `register` is idempotent: it creates the key when missing, removes it from the other plans (a key
 *   belongs to at most one plan of a stage), and adds it to the plan's usage plan. So it also moves a key
 *   left on another plan, e.g. an enterprise feed's key that an older version put on Pro.
 * - Each feed plan has its own usage plan: Enterprise has no daily quota (the feed's custom hourly limit,
 *   enforced by the application, stays the only volume limit); the gateway adds its per-second throttle.
 * - `unregister` deletes the key (which also removes its plan association); an unknown id is a no-op.
 */
export class ApiGatewayApiKeyRegistry implements ApiKeyRegistry {
  constructor(
    private readonly client: APIGatewayClient,
    private readonly usagePlanIds: UsagePlanIds,
  ) {}

  async register(key: SearchKey, plan: Feed['plan']): Promise<void> {
    const keyId = await this.ensureApiKey(key);
    const target = this.usagePlanIds[plan];
    for (const other of Object.values(this.usagePlanIds)) {
      if (other === target) continue;
      await ignoring(NotFoundException, () =>
        this.client.send(new DeleteUsagePlanKeyCommand({ usagePlanId: other, keyId })),
      );
    }
    await ignoring(ConflictException, () =>
      this.client.send(new CreateUsagePlanKeyCommand({ usagePlanId: target, keyId, keyType: 'API_KEY' })),
    );
  }

  async unregister(searchId: string): Promise<void> {
    const keyId = await this.findApiKeyId(searchId);
    if (!keyId) return;
    await ignoring(NotFoundException, () => this.client.send(new DeleteApiKeyCommand({ apiKey: keyId })));
  }

  private async ensureApiKey(key: SearchKey): Promise<string> {
    const existing = await this.findApiKeyId(key.searchId);
    if (existing) return existing;
    try {
      const created = await this.client.send(
        new CreateApiKeyCommand({
          name: apiKeyName(key.searchId),
          value: key.searchId,
          enabled: true,
          description: `Search id of feed ${key.feedId}`,
        }),
      );
      if (!created.id) throw new Error('API Gateway created an API key without an id');
      return created.id;
    } catch (error) {
      // A concurrent register created it first: use that one.
      if (!(error instanceof ConflictException)) throw error;
      const raced = await this.findApiKeyId(key.searchId);
      if (!raced) throw error;
      return raced;
    }
  }

  /** The gateway id of the API key whose value is this search id. */
  private async findApiKeyId(searchId: string): Promise<string | undefined> {
    let position: string | undefined;
    do {
      const page = await this.client.send(
        new GetApiKeysCommand({ nameQuery: apiKeyName(searchId), includeValues: true, position, limit: 500 }),
      );
      const match = page.items?.find((item) => item.value === searchId);
      if (match?.id) return match.id;
      position = page.position;
    } while (position);
    return undefined;
  }
}

/** API key name for a search id: a hash, so the id itself never appears in names or listings. */
export function apiKeyName(searchId: string): string {
  return `sid-${createHash('sha256').update(searchId).digest('hex').slice(0, 24)}`;
}

async function ignoring<E extends Error>(
  kind: abstract new (...args: never[]) => E,
  call: () => Promise<unknown>,
): Promise<void> {
  try {
    await call();
  } catch (error) {
    if (!(error instanceof kind)) throw error;
  }
}
