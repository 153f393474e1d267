/**
 * The workbench's reads of a node's `/metrics` and `/flags`: the nodes answer them only with the metrics
 * or the admin token (broker/http/operator.ts), and every workbench reader holds the admin token.
 */
export function operatorGet(url: string, token: string, timeoutMs?: number): Promise<Response> {
  return fetch(url, {
    headers: { authorization: `Bearer ${token}` },
    ...(timeoutMs === undefined ? {} : { signal: AbortSignal.timeout(timeoutMs) }),
  });
}
