import { expect } from 'vitest';
import type { TestResponse } from '#test/support/local-stack.ts';

/** Asserts the one error body of DESIGN §3 with the given status and code. */
export function expectError(response: TestResponse, status: number, code: string): void {
  expect(response.status, JSON.stringify(response.body)).toBe(status);
  expect(response.headers.get('content-type')).toMatch(/^application\/json/);
  expect(response.body).toEqual({
    error: { status, code, message: expect.any(String), details: expect.any(Array) },
    requestId: expect.any(String),
  });
  expect(response.body.error.message.length).toBeGreaterThan(0);
}
