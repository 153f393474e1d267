/**
 * Bad HTTP requests, generated from a seed: malformed and wrongly typed JSON bodies, wrong content types,
 * bodies over the limit, bad ids in paths, to the public hook and (with the token) the admin API. Every one
 * must get a 4xx answer: never a 5xx, never a hang.
 */
import type { Random } from './random.js';

export interface BadRequest {
  kind: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string;
}

const BODIES: Array<(random: Random) => string> = [
  (random) => random.bytes(random.int(1, 100)).toString('latin1'),
  () => '{"sessionId": ',
  () => '[]',
  () => 'null',
  () => '{"sessionId": 5, "status": []}',
  () => '{"sessionId": "not-a-uuid", "status": "x"}',
  () => '{"name": {"$gt": ""}}',
  () => '{"name": ""}',
  () => '{"pubkey": "zz"}',
  () => `{"name": "${'n'.repeat(10_000)}"}`,
  () => '{"name": "a\\u0000b"}',
];

export function badRequests(random: Random, count: number, adminToken: string): BadRequest[] {
  const auth = { authorization: `Bearer ${adminToken}` };
  return Array.from({ length: count }, () => {
    const body = random.pick(BODIES)(random);
    const json = { 'content-type': random.pick(['application/json', 'application/json; charset=utf-8']) };
    return random.pick<() => BadRequest>([
      () => ({ kind: 'hook body', method: 'POST', path: '/hook/status', headers: json, body }),
      () => ({
        kind: 'admin mesh body',
        method: 'POST',
        path: '/admin/meshes',
        headers: { ...json, ...auth },
        body,
      }),
      () => ({
        kind: 'admin member body',
        method: 'POST',
        path: `/admin/meshes/${random.pick(['x', '00000000-0000-4000-8000-000000000000', '%00', '..%2f..'])}/members`,
        headers: { ...json, ...auth },
        body,
      }),
      () => ({
        kind: 'wrong content type',
        method: 'POST',
        path: random.pick(['/hook/status', '/admin/meshes']),
        headers: {
          'content-type': random.pick(['text/plain', 'application/xml', 'multipart/form-data']),
          ...auth,
        },
        body,
      }),
      () => ({
        kind: 'body over the limit',
        method: 'POST',
        path: '/hook/status',
        headers: json,
        body: `{"sessionId": "${'x'.repeat(1_100_000)}"}`,
      }),
      () => ({
        kind: 'admin without the token',
        method: 'POST',
        path: '/admin/meshes',
        headers: json,
        body: '{"name":"x"}',
      }),
      () => ({
        kind: 'bad id in a path',
        method: random.pick(['GET', 'DELETE']),
        path: `/admin/meshes/${random.pick(['x', '1; DROP TABLE meshes', '%ff%fe', '0'.repeat(300)])}`,
        headers: auth,
      }),
    ])();
  });
}
