import type { ApiKeyRegistry } from '#lib/ports.ts';

/** Local mode has no API gateway in front of it: application limits are the only limits. */
export class NoopApiKeyRegistry implements ApiKeyRegistry {
  async register(): Promise<void> {}
  async unregister(): Promise<void> {}
}
