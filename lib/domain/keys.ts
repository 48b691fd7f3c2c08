import { randomBytes } from 'node:crypto';

/** A search id (API key): an opaque secret bound to exactly one feed. */
export interface SearchKey {
  searchId: string;
  feedId: string;
  /** Free label chosen in the dashboard ("storefront", "staging"). */
  name: string;
  createdAt: string;
  lastUsedAt?: string;
  revokedAt?: string;
}

/** 192 random bits, base64url: unguessable and safe in headers and JSON. */
export function newSearchId(): string {
  return `vps_${randomBytes(24).toString('base64url')}`;
}

/** Search ids as they are shown in listings after creation: enough to recognise, not to use. */
export function maskSearchId(searchId: string): string {
  return `${searchId.slice(0, 8)}…${searchId.slice(-4)}`;
}
