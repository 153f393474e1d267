/**
 * The database roles of docs/design.md § Database roles, by their default names (migration 0014 makes them
 * when missing), and the connection string of one of them on the server and database of another.
 */

/** What the brokers connect as: rows of the tables they use, EXECUTE on accept_messages, no DDL. */
export const BROKER_ROLE = 'mesh_broker';
/** What the audit verifier connects as: reads audit_log, keeps its progress table, nothing else. */
export const VERIFIER_ROLE = 'mesh_verifier';

/**
 * `databaseUrl` with `role` as its user and no password: a role made by the migration has none, and logs in
 * only where the server trusts it (a local workbench or test server). Elsewhere give the role's own URL.
 */
export function databaseUrlAs(databaseUrl: string, role: string): string {
  const url = new URL(databaseUrl);
  url.username = encodeURIComponent(role);
  url.password = '';
  return url.toString();
}
