import { describe, expect, it } from 'vitest';
import { CreateFeedRequest, UpdateFeedRequest } from '#lib/domain/admin/schemas.ts';
import { DOMAIN_PATTERN } from '#lib/domain/feeds.ts';
import { ErrorBodySchema, OPERATION_DOCS, buildOpenApiDocument } from '#lib/http/openapi.ts';
import { ROUTES } from '#lib/http/routes.ts';
import { stringKeywordProblems } from '#test/support/json-schema-strings.ts';

/**
 * A small structural validator of the OpenAPI 3.1 document (no validator package installs offline for
 * 3.1), plus: every example is accepted by the zod schema it illustrates.
 */
type Json = Record<string, unknown>;
const doc = buildOpenApiDocument() as Json & {
  paths: Record<string, Record<string, Json>>;
  components: Json & { schemas: Json; securitySchemes: Json; headers: Json };
};
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** Every `$ref` in the document, with where it was found. */
function refs(node: unknown, at = '#'): { ref: string; at: string }[] {
  if (Array.isArray(node)) return node.flatMap((item, i) => refs(item, `${at}/${i}`));
  if (!node || typeof node !== 'object') return [];
  return Object.entries(node as Json).flatMap(([key, value]) =>
    key === '$ref' && typeof value === 'string' ? [{ ref: value, at }] : refs(value, `${at}/${key}`),
  );
}

function resolvePointer(pointer: string): unknown {
  let node: unknown = doc;
  for (const part of pointer.replace(/^#\//, '').split('/'))
    node = (node as Json | undefined)?.[part.replace(/~1/g, '/')];
  return node;
}

const operations = Object.entries(doc.paths).flatMap(([path, item]) =>
  Object.entries(item).map(([method, op]) => ({ path, method, op })),
);

describe('OpenAPI document structure', () => {
  it('has the required top-level fields of OpenAPI 3.1', () => {
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    expect(doc.info).toMatchObject({ title: expect.any(String), version: expect.any(String) });
    expect(Array.isArray(doc.servers)).toBe(true);
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(['adminToken', 'searchId']);
    for (const header of [
      'RateLimit-Limit',
      'RateLimit-Remaining',
      'RateLimit-Reset',
      'Retry-After',
      'Vary',
      'WWW-Authenticate',
      'X-Request-Id',
    ]) {
      expect(doc.components.headers[header], header).toMatchObject({
        description: expect.any(String),
        schema: expect.any(Object),
      });
    }
  });

  it('resolves every $ref', () => {
    const all = refs(doc);
    expect(all.length).toBeGreaterThan(0);
    for (const { ref, at } of all) {
      expect(ref.startsWith('#/'), `${at}: external ref ${ref}`).toBe(true);
      expect(resolvePointer(ref), `${at}: dangling ${ref}`).toBeDefined();
    }
  });

  it('gives each operation a unique id, known security, declared path parameters and valid responses', () => {
    const ids = new Set<string>();
    for (const { path, method, op } of operations) {
      const where = `${method.toUpperCase()} ${path}`;
      expect(METHODS, where).toContain(method);
      expect(path.startsWith('/'), where).toBe(true);
      expect(ids.has(op.operationId as string), `${where}: duplicate operationId`).toBe(false);
      ids.add(op.operationId as string);
      for (const requirement of op.security as Json[]) {
        for (const scheme of Object.keys(requirement))
          expect(doc.components.securitySchemes, where).toHaveProperty(scheme);
      }
      const templated = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
      const parameters = (op.parameters ?? []) as Json[];
      expect(
        parameters
          .filter((p) => p.in === 'path')
          .map((p) => p.name)
          .sort(),
        where,
      ).toEqual(templated);
      for (const p of parameters) {
        expect(['path', 'query', 'header', 'cookie'], where).toContain(p.in);
        expect(p.schema, `${where} ${String(p.name)}`).toBeTypeOf('object');
        if (p.in === 'path') expect(p.required, where).toBe(true);
      }
      const responses = op.responses as Record<string, Json>;
      expect(Object.keys(responses).length, where).toBeGreaterThan(1);
      for (const [status, response] of Object.entries(responses)) {
        expect(status, where).toMatch(/^[1-5]\d\d$/);
        expect(response.description, `${where} ${status}`).toBeTypeOf('string');
      }
    }
  });

  it('puts the rate-limit headers on public successes and Retry-After on every 429', () => {
    for (const route of ROUTES) {
      const op = doc.paths[route.path]![route.method.toLowerCase()]!;
      const responses = op.responses as Record<string, Json & { headers?: Json }>;
      const success = Object.entries(responses).find(([status]) => status.startsWith('2'))![1];
      if (route.access === 'public') {
        expect(Object.keys(success.headers ?? {}), route.name).toEqual(
          expect.arrayContaining(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']),
        );
        expect(Object.keys(responses['429']?.headers ?? {}), route.name).toContain('Retry-After');
      }
    }
  });

  it('declares WWW-Authenticate on every 401, and Vary on every answer a handler gives, as the middleware sends them', () => {
    let unauthorized = 0;
    let early = 0;
    for (const { path, method, op } of operations) {
      const responses = op.responses as Record<string, { headers?: Json; description: string }>;
      for (const [status, response] of Object.entries(responses)) {
        const where = `${method.toUpperCase()} ${path} ${status}`;
        const headers = Object.keys(response.headers ?? {});
        // A 413 is answered before the handler, as the gateway's own errors (the local server mirrors
        // them): no Vary, which the document declared though neither sends it.
        if (status === '413') {
          early++;
          expect(headers, where).not.toContain('Vary');
          expect(response.description, where).toMatch(/before the handler runs.*no `Vary`/);
          expect(response.description.includes('any origin (`*`)'), where).toBe(!path.startsWith('/admin/'));
        } else expect(headers, where).toContain('Vary');
        if (status === '401') unauthorized++;
        expect(headers.includes('WWW-Authenticate'), where).toBe(status === '401');
      }
    }
    // (Every operation has a 401: a search id or the admin token is required on every route.)
    expect(unauthorized).toBe(operations.length);
    expect(early).toBeGreaterThan(0);
  });

  it('has examples that the schemas they illustrate accept', () => {
    for (const [name, opDoc] of Object.entries(OPERATION_DOCS)) {
      if (opDoc.body)
        expect(opDoc.body.schema.safeParse(opDoc.body.example).success, `${name} request example`).toBe(true);
      if (opDoc.response.zod && opDoc.response.example !== undefined) {
        expect(opDoc.response.zod.safeParse(opDoc.response.example).success, `${name} response example`).toBe(
          true,
        );
      }
    }
    let errorExamples = 0;
    for (const { path, method, op } of operations) {
      for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
        const examples = ((response.content as Json | undefined)?.['application/json'] as Json | undefined)
          ?.examples as Record<string, { value: { error: { status: number } } }> | undefined;
        for (const [code, example] of Object.entries(examples ?? {})) {
          expect(ErrorBodySchema.safeParse(example.value).success, `${method} ${path} ${code}`).toBe(true);
          expect(String(example.value.error.status)).toBe(status);
          errorExamples++;
        }
      }
    }
    expect(errorExamples).toBeGreaterThan(ROUTES.length * 2);
  });

  it('describes feed domains as requests send them and as answers give them', () => {
    // Entries the server accepts and normalises (audit, 2026-11-27): the request schemas carried the
    // stored form's pattern, so a client validating against the document refused them.
    const sent = [
      'https://shop.example.com:8443',
      'Shop2.Example.com.',
      'bücher.example',
      'https://192.0.2.10',
    ];
    const schemas = doc.components.schemas as Record<string, { properties: Record<string, Json> }>;
    const items = (name: string) => schemas[name]!.properties.domains!.items as Json;
    for (const name of ['CreateFeedRequest', 'UpdateFeedRequest']) {
      for (const entry of sent)
        expect(stringKeywordProblems(items(name), entry), `${name} ${entry}`).toEqual([]);
      expect(items(name).description, name).toMatch(/punycode/);
    }
    const created = CreateFeedRequest.parse({ name: 'x', domains: sent });
    expect(UpdateFeedRequest.parse({ domains: sent }).domains).toEqual(created.domains);
    // Answers give the stored form, which the Feed schema's pattern describes (the same constant).
    expect(items('Feed').pattern).toBe(DOMAIN_PATTERN.source);
    expect(created.domains).toEqual([
      'shop.example.com',
      'shop2.example.com',
      'xn--bcher-kva.example',
      '192.0.2.10',
    ]);
    for (const stored of created.domains)
      expect(stringKeywordProblems(items('Feed'), stored), stored).toEqual([]);
    expect(stringKeywordProblems(items('Feed'), sent[0]!)).not.toEqual([]);
  });
});
