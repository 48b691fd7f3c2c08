import { readFile } from 'node:fs/promises';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { TABLE_ACTIONS, type TableName } from '../../infra/constructs/bindings.ts';
import { PUBLIC_PROFILE } from '../../infra/route-access.ts';
import { startTestStack, type TestStack } from '#test/support/local-stack.ts';

/**
 * The DynamoDB calls the public endpoints make, against the grants their functions get in AWS
 * (infra/route-access.ts PUBLIC_PROFILE): a call outside them is AccessDenied there, on every request,
 * while local mode (no IAM) answers. The rate limit's Query of a search id's recent buckets was such a
 * call. The calls are recorded as they pass (nothing is changed).
 */
let stack: TestStack;
let photo: string;

beforeAll(async () => {
  stack = await startTestStack();
  await stack.importsIdle();
  photo = (await readFile(new URL('../../demo/images/tools-hammer3.webp', import.meta.url))).toString(
    'base64',
  );
});

afterAll(async () => {
  await stack?.stop();
});

/** The IAM action of a document client command (GetCommand → dynamodb:GetItem). */
const ACTION_OF: Record<string, string> = {
  GetCommand: 'dynamodb:GetItem',
  BatchGetCommand: 'dynamodb:BatchGetItem',
  QueryCommand: 'dynamodb:Query',
  ScanCommand: 'dynamodb:Scan',
  PutCommand: 'dynamodb:PutItem',
  UpdateCommand: 'dynamodb:UpdateItem',
  DeleteCommand: 'dynamodb:DeleteItem',
  BatchWriteCommand: 'dynamodb:BatchWriteItem',
  TransactWriteCommand: 'dynamodb:TransactWriteItems',
  TransactGetCommand: 'dynamodb:TransactGetItems',
};

describe('public endpoints in AWS', () => {
  it('call DynamoDB only within the grants their functions get', async () => {
    // Prepare: every call from here on, by table and action
    const tableOf = new Map(
      Object.entries(stack.config.tables).map(([name, table]) => [table, name as TableName]),
    );
    const calls = new Set<string>();
    const original = DynamoDBDocumentClient.prototype.send;
    const send = vi.spyOn(DynamoDBDocumentClient.prototype, 'send').mockImplementation(function (
      this: DynamoDBDocumentClient,
      ...args: unknown[]
    ) {
      const command = args[0] as { constructor: { name: string }; input: Record<string, unknown> };
      const tables = command.input.TableName
        ? [command.input.TableName as string]
        : Object.keys((command.input.RequestItems ?? command.input.TransactItems ?? {}) as object);
      const action = ACTION_OF[command.constructor.name] ?? command.constructor.name;
      for (const table of tables) calls.add(`${tableOf.get(table) ?? table} ${action}`);
      return (original as (...a: unknown[]) => unknown).apply(this, args) as never;
    });
    try {
      // Act: each public endpoint, as a widget calls it (the header and the body forms of the id)
      const auth = { authorization: `Bearer ${stack.demo.searchId}` };
      const answers = [
        await stack.call('POST', '/api/v1/search/image', { body: { imageData: photo }, headers: auth }),
        await stack.call('POST', '/api/v1/detect', {
          body: { imageData: photo, action: 'OD+SEARCH' },
          headers: auth,
        }),
        await stack.call('POST', '/api/v1/related', {
          body: { productId: 'hammer-claw', context: { type: 'pdp', domain: 'shop.example' } },
          headers: auth,
        }),
        await stack.call('POST', '/', {
          body: { imageData: photo, limit: 5, offset: 0, feedId: stack.demo.searchId },
        }),
      ];
      expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200, 200]);
    } finally {
      send.mockRestore();
    }
    // Assess
    expect(calls.size).toBeGreaterThan(0);
    const outside = [...calls].filter((call) => {
      const [table, action] = call.split(' ') as [TableName, string];
      const access = PUBLIC_PROFILE.tables[table];
      return !access || !TABLE_ACTIONS[access].includes(action);
    });
    expect(outside, `calls: ${[...calls].sort().join(', ')}`).toEqual([]);
  });
});
