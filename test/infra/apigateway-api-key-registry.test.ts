import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { APIGatewayClient } from '@aws-sdk/client-api-gateway';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ApiGatewayApiKeyRegistry, apiKeyName } from '#lib/adapters/apigateway-api-key-registry.ts';
import type { SearchKey } from '#lib/domain/keys.ts';

/**
 * A small API Gateway: the REST calls the registry makes (GetApiKeys, CreateApiKey, DeleteApiKey,
 * CreateUsagePlanKey, DeleteUsagePlanKey), with API Gateway's conflict rules: a key value is unique, and a
 * key can be in only one plan of a stage (all plans here cover the same stage).
 */
class FakeApiGateway {
  readonly keys = new Map<string, { id: string; name: string; value: string; enabled: boolean }>();
  readonly planKeys = new Map<string, Set<string>>([
    ['plan-free', new Set()],
    ['plan-pro', new Set()],
    ['plan-enterprise', new Set()],
  ]);
  readonly calls: string[] = [];
  #server: Server | undefined;

  async start(): Promise<string> {
    this.#server = createServer((req, res) => void this.#handle(req, res));
    await new Promise<void>((resolve) => this.#server!.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.#server!.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.#server?.close(() => resolve()));
  }

  planOf(keyId: string): string | undefined {
    return [...this.planKeys].find(([, members]) => members.has(keyId))?.[0];
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = chunks.length
      ? (JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>)
      : {};
    const url = new URL(req.url ?? '/', 'http://localhost');
    this.calls.push(`${req.method} ${url.pathname}`);
    const send = (status: number, payload: unknown, errorType?: string) => {
      res.writeHead(status, {
        'content-type': 'application/json',
        ...(errorType ? { 'x-amzn-errortype': errorType } : {}),
      });
      res.end(JSON.stringify(payload));
    };
    const parts = url.pathname.split('/').filter(Boolean);

    if (req.method === 'GET' && url.pathname === '/apikeys') {
      const prefix = url.searchParams.get('name') ?? '';
      const withValues = url.searchParams.get('includeValues') === 'true';
      const items = [...this.keys.values()]
        .filter((key) => key.name.startsWith(prefix))
        .map((key) => (withValues ? key : { ...key, value: undefined }));
      return send(200, { item: items });
    }
    if (req.method === 'POST' && url.pathname === '/apikeys') {
      if ([...this.keys.values()].some((key) => key.value === body.value)) {
        return send(409, { message: 'API Key already exists' }, 'ConflictException');
      }
      const key = {
        id: randomUUID().slice(0, 10),
        name: String(body.name),
        value: String(body.value),
        enabled: body.enabled === true,
      };
      this.keys.set(key.id, key);
      return send(201, key);
    }
    if (req.method === 'DELETE' && parts[0] === 'apikeys' && parts[1]) {
      if (!this.keys.delete(parts[1]))
        return send(404, { message: 'Invalid API Key identifier specified' }, 'NotFoundException');
      for (const members of this.planKeys.values()) members.delete(parts[1]);
      return send(202, {});
    }
    if (parts[0] === 'usageplans' && parts[2] === 'keys') {
      const members = this.planKeys.get(parts[1] ?? '');
      if (!members) return send(404, { message: 'Invalid Usage Plan ID specified' }, 'NotFoundException');
      if (req.method === 'POST') {
        const keyId = String(body.keyId);
        if (!this.keys.has(keyId))
          return send(404, { message: 'Invalid API Key identifier specified' }, 'NotFoundException');
        if (this.planOf(keyId)) {
          return send(
            409,
            { message: 'Usage Plan already contains specified API key / same stage' },
            'ConflictException',
          );
        }
        members.add(keyId);
        return send(201, { id: keyId, type: 'API_KEY' });
      }
      if (req.method === 'DELETE' && parts[3]) {
        if (!members.delete(parts[3]))
          return send(404, { message: 'Invalid API Key identifier specified' }, 'NotFoundException');
        return send(202, {});
      }
    }
    send(404, { message: `no route ${req.method} ${url.pathname}` }, 'NotFoundException');
  }
}

const gateway = new FakeApiGateway();
let registry: ApiGatewayApiKeyRegistry;
let endpoint: string;

const clientFor = (url: string) =>
  new APIGatewayClient({
    endpoint: url,
    region: 'eu-west-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts: 1,
  });

const searchKey = (searchId: string): SearchKey => ({
  searchId,
  feedId: 'feed-a',
  name: 'test key',
  createdAt: '2026-11-22T00:00:00.000Z',
});

beforeAll(async () => {
  endpoint = await gateway.start();
  registry = new ApiGatewayApiKeyRegistry(clientFor(endpoint), {
    free: 'plan-free',
    pro: 'plan-pro',
    enterprise: 'plan-enterprise',
  });
});

afterAll(async () => {
  await gateway.stop();
});

beforeEach(() => {
  gateway.keys.clear();
  for (const members of gateway.planKeys.values()) members.clear();
  gateway.calls.length = 0;
});

const keyOf = (searchId: string) => [...gateway.keys.values()].find((key) => key.value === searchId);

describe('ApiGatewayApiKeyRegistry', () => {
  it('creates an enabled API key whose value is the search id and adds it to the plan', async () => {
    // Act
    await registry.register(searchKey('sid_aaaaaaaaaaaaaaaaaaaaaaaa'), 'free');

    // Assess
    const key = keyOf('sid_aaaaaaaaaaaaaaaaaaaaaaaa');
    expect(key).toMatchObject({ enabled: true, name: apiKeyName('sid_aaaaaaaaaaaaaaaaaaaaaaaa') });
    expect(gateway.planOf(key!.id)).toBe('plan-free');
  });

  it('never puts the search id in the key name', async () => {
    await registry.register(searchKey('sid_secretsecretsecretsecret'), 'pro');
    expect(keyOf('sid_secretsecretsecretsecret')!.name).not.toContain('secret');
  });

  it('puts the keys of enterprise feeds on the Enterprise plan (not Pro and its daily quota)', async () => {
    await registry.register(searchKey('sid_enterpriseenterprise00'), 'enterprise');
    expect(gateway.planOf(keyOf('sid_enterpriseenterprise00')!.id)).toBe('plan-enterprise');
  });

  it("moves an enterprise feed's key that an earlier version left on Pro when it is registered again", async () => {
    // Prepare: the key as the two-plan registry left it (enterprise feeds on Pro).
    gateway.keys.set('legacy', {
      id: 'legacy',
      name: apiKeyName('sid_legacylegacylegacy0000'),
      value: 'sid_legacylegacylegacy0000',
      enabled: true,
    });
    gateway.planKeys.get('plan-pro')!.add('legacy');

    // Act
    await registry.register(searchKey('sid_legacylegacylegacy0000'), 'enterprise');

    // Assess: the same key, now on Enterprise only.
    expect(gateway.keys.size).toBe(1);
    expect(gateway.planOf('legacy')).toBe('plan-enterprise');
    expect(gateway.planKeys.get('plan-pro')!.has('legacy')).toBe(false);
  });

  it('moves a key off the Enterprise plan when the feed leaves it', async () => {
    // Prepare
    await registry.register(searchKey('sid_downgradedowngrade0000'), 'enterprise');
    const id = keyOf('sid_downgradedowngrade0000')!.id;

    // Act
    await registry.register(searchKey('sid_downgradedowngrade0000'), 'pro');

    // Assess
    expect(gateway.planOf(id)).toBe('plan-pro');
    expect(gateway.calls).toContain(`DELETE /usageplans/plan-enterprise/keys/${id}`);
  });

  it('is idempotent: registering twice keeps one key in one plan', async () => {
    // Prepare
    await registry.register(searchKey('sid_twicetwicetwicetwice000'), 'free');

    // Act
    await registry.register(searchKey('sid_twicetwicetwicetwice000'), 'free');

    // Assess
    expect(
      [...gateway.keys.values()].filter((key) => key.value === 'sid_twicetwicetwicetwice000'),
    ).toHaveLength(1);
    expect(gateway.planOf(keyOf('sid_twicetwicetwicetwice000')!.id)).toBe('plan-free');
  });

  it('moves a key to the other plan when the feed changes plan', async () => {
    // Prepare
    await registry.register(searchKey('sid_movingmovingmoving00000'), 'free');
    const id = keyOf('sid_movingmovingmoving00000')!.id;

    // Act
    await registry.register(searchKey('sid_movingmovingmoving00000'), 'pro');

    // Assess
    expect(gateway.planOf(id)).toBe('plan-pro');
    expect(gateway.planKeys.get('plan-free')!.has(id)).toBe(false);
    expect(gateway.calls).toContain(`DELETE /usageplans/plan-free/keys/${id}`);
  });

  it('tells keys apart whose hashed names share a prefix by their value', async () => {
    // Prepare: a foreign key with the same name but another value.
    gateway.keys.set('other', {
      id: 'other',
      name: apiKeyName('sid_lookuplookuplookup0000'),
      value: 'sid_someoneelse',
      enabled: true,
    });

    // Act
    await registry.register(searchKey('sid_lookuplookuplookup0000'), 'free');

    // Assess
    expect(keyOf('sid_lookuplookuplookup0000')!.id).not.toBe('other');
  });

  it('deletes the API key on unregister', async () => {
    // Prepare
    await registry.register(searchKey('sid_revokedrevokedrevoked00'), 'pro');
    const id = keyOf('sid_revokedrevokedrevoked00')!.id;

    // Act
    await registry.unregister('sid_revokedrevokedrevoked00');

    // Assess
    expect(gateway.keys.has(id)).toBe(false);
    expect(gateway.planOf(id)).toBeUndefined();
  });

  it('treats unregistering an unknown search id as done', async () => {
    await expect(registry.unregister('sid_neverregistered0000000')).resolves.toBeUndefined();
    expect(gateway.calls.filter((call) => call.startsWith('DELETE'))).toEqual([]);
  });

  it('surfaces gateway errors other than conflicts and missing keys', async () => {
    // Prepare: a registry pointed at a usage plan that does not exist.
    const broken = new ApiGatewayApiKeyRegistry(clientFor(endpoint), {
      free: 'plan-missing',
      pro: 'plan-pro',
      enterprise: 'plan-enterprise',
    });

    // Act + Assess
    await expect(broken.register(searchKey('sid_brokenbrokenbroken00000'), 'free')).rejects.toThrow(
      /Usage Plan/,
    );
  });
});
