-- Message identity that survives a rewound history (issue 25, item 3; docs/protocol.md § Message identity).
-- `messages.id` comes from an identity sequence, and a restore of a backup or a promotion of a replica that
-- lost a WAL tail sets the sequence back: the next message gets an id a peer has already seen, and the SDK,
-- which drops repeats by messageId, would drop it. Each message gets a tag of 64 random bits (16 lowercase
-- hex digits, made in Postgres, so every broker and every accept path gets one without asking), and its
-- messageId is `<id>-<tag>`: an id handed out again comes with another tag. Existing rows get a tag too
-- (a volatile default is evaluated per row when the column is added, which rewrites the table under an
-- exclusive lock: sends wait for it; the table holds at most the retention window, MESSAGE_RETENTION_MS).
ALTER TABLE "messages" ADD COLUMN "tag" text DEFAULT substr(md5(gen_random_uuid()::text), 1, 16) NOT NULL;
--> statement-breakpoint
-- accept_messages (migration 0013) as it was, but returning each message's tag after its id. Its result
-- type changes, so it is dropped and created again (CREATE OR REPLACE cannot change a result type).
DROP FUNCTION "accept_messages"(uuid[], bigint[], uuid[], text[], text[], text[], text[], text[], uuid[],
	integer[], boolean[], integer);
--> statement-breakpoint
CREATE FUNCTION "accept_messages"(
	mesh_ids uuid[], sender_ids bigint[], sender_sessions uuid[], sender_pubkeys text[], client_ids text[],
	targets text[], bodies text[], kinds text[], schedule_ids uuid[], occurrences integer[], allow_self boolean[],
	backlog_max integer
) RETURNS TABLE (
	-- Null: accepted (or a duplicate); otherwise the refusal's ProtocolError code.
	refused text,
	message_id bigint, message_tag text, client_id text, sender_pubkey text, sender_session uuid, target text, body text,
	kind text, schedule_id uuid, occurrence integer, created_at timestamptz,
	-- The members owed the message, in member order, and each one's seq (empty for a duplicate).
	recipients bigint[], seqs bigint[],
	duplicate boolean,
	-- Null for a broadcast (every node is woken) and for a duplicate (nothing is sent again).
	nodes text[],
	dropped integer
) LANGUAGE plpgsql AS $$
-- The output columns are variables too; in the queries below, a bare name is always the table's column.
#variable_conflict use_column
DECLARE
	-- Per request: null (still standing), 'duplicate', 'copy', or a refusal's code.
	standing text[];
	-- Per request: the first request of the batch with its (mesh, sender, id); itself if none before it.
	first_copy integer[];
	-- Every (request, recipient) of the requests standing after step 1, in request then member order.
	pairs accept_recipient[];
	-- The pairs that get a delivery row, with their seqs (step 5).
	delivered accept_recipient[];
	-- Per request: the stored message's id, tag and time (step 4); null for every other outcome.
	message_ids bigint[] := array_fill(NULL::bigint, ARRAY[cardinality(client_ids)]);
	message_tags text[] := array_fill(NULL::text, ARRAY[cardinality(client_ids)]);
	created_ats timestamptz[] := array_fill(NULL::timestamptz, ARRAY[cardinality(client_ids)]);
	full_dm integer;
	inserted record;
	outcomes integer;
BEGIN
	-- 1. Where each request stands before any feed is locked (the branches in the order the checks apply).
	SELECT array_agg(CASE
	           WHEN EXISTS (SELECT FROM messages m
	                         WHERE m.mesh_id = mesh_ids[i] AND m.sender_id = sender_ids[i] AND m.client_id = client_ids[i])
	             THEN 'duplicate'
	           WHEN earliest < i THEN 'copy'
	           WHEN EXISTS (SELECT FROM members s WHERE s.id = sender_ids[i] AND s.revoked_at IS NOT NULL)
	             THEN 'forbidden'
	           WHEN targets[i] = '*' OR starts_with(targets[i], '@') THEN NULL
	           WHEN targets[i] = sender_pubkeys[i] AND allow_self[i] IS NOT TRUE THEN 'bad_request'
	           WHEN NOT EXISTS (SELECT FROM members r
	                             WHERE r.mesh_id = mesh_ids[i] AND r.pubkey = targets[i] AND r.revoked_at IS NULL)
	             THEN 'not_found'
	         END ORDER BY i),
	       array_agg(earliest ORDER BY i)
	  INTO standing, first_copy
	  FROM (SELECT i, min(i) OVER (PARTITION BY mesh_ids[i], sender_ids[i], client_ids[i]) AS earliest
	          FROM generate_subscripts(client_ids, 1) AS i) batch;

	-- 2. The recipients of the requests still standing, never a revoked member: a DM's named member; every
	-- other member of the mesh for a broadcast ('*'), or of the group ('@group': the groups of each
	-- member's latest hello). Two branches so that a DM is an index lookup by (mesh, pubkey).
	SELECT array_agg((request, member_id, NULL, NULL, NULL)::accept_recipient ORDER BY request, member_id)
	  INTO pairs
	  FROM (SELECT i AS request, r.id AS member_id
	          FROM generate_subscripts(client_ids, 1) AS i
	          JOIN members r ON r.mesh_id = mesh_ids[i] AND r.pubkey = targets[i] AND r.revoked_at IS NULL
	         WHERE standing[i] IS NULL AND targets[i] <> '*' AND NOT starts_with(targets[i], '@')
	        UNION ALL
	        SELECT i, r.id
	          FROM generate_subscripts(client_ids, 1) AS i
	          JOIN members r ON r.mesh_id = mesh_ids[i] AND r.id <> sender_ids[i] AND r.revoked_at IS NULL
	         WHERE standing[i] IS NULL
	           AND (targets[i] = '*' OR (starts_with(targets[i], '@') AND substr(targets[i], 2) = ANY (r.groups)))
	       ) recipient;

	-- 3. Lock the recipients' feeds, all at once and in member order (two batches never deadlock), so that
	-- their seqs are assigned and committed in order, then apply the backlog bound. Within the batch a
	-- member's owed count grows by one per request it is kept for, and only while it is below the bound,
	-- so it is kept for a request exactly when (owed at the lock) + (earlier requests of this batch it is a
	-- recipient of) < backlog_max.
	WITH locked AS (
	  INSERT INTO delivery_feeds (member_id)
	  SELECT DISTINCT member_id FROM unnest(pairs) ORDER BY member_id
	  ON CONFLICT (member_id) DO UPDATE SET last_seq = delivery_feeds.last_seq
	  RETURNING member_id, last_seq,
	            (SELECT count(*) FROM deliveries d WHERE d.member_id = delivery_feeds.member_id) AS owed)
	SELECT array_agg((request, member_id, kept, feed_seq, NULL)::accept_recipient ORDER BY request, member_id)
	  INTO pairs
	  FROM (SELECT p.request, p.member_id, l.last_seq AS feed_seq,
	               l.owed + row_number() OVER (PARTITION BY p.member_id ORDER BY p.request) - 1 < backlog_max AS kept
	          FROM unnest(pairs) p JOIN locked l USING (member_id)) ranked;
	-- A DM has one recipient: if it is full, the DM is refused (a broadcast or group message skips it).
	FOR full_dm IN SELECT p.request FROM unnest(pairs) p
	                WHERE NOT p.kept AND targets[p.request] <> '*' AND NOT starts_with(targets[p.request], '@') LOOP
		standing[full_dm] := 'limit_exceeded';
	END LOOP;

	-- 4. The messages of the requests still standing, each with its kept recipients in member order (what a
	-- retry's `sent` gets back later, when delivery rows may be gone). One accepted meanwhile by another node
	-- (a retry racing its original) conflicts: the original it is.
	FOR inserted IN
	  WITH stored AS (
	    INSERT INTO messages (mesh_id, sender_id, sender_session, client_id, target, body, kind, schedule_id,
	                          occurrence, recipients)
	    SELECT mesh_ids[i], sender_ids[i], sender_sessions[i], client_ids[i], targets[i], bodies[i], kinds[i],
	           schedule_ids[i], occurrences[i], coalesce(k.members, '{}')
	      FROM generate_subscripts(client_ids, 1) AS i
	      LEFT JOIN (SELECT request, array_agg(member_id ORDER BY member_id) AS members
	                   FROM unnest(pairs) WHERE kept GROUP BY request) k ON k.request = i
	     WHERE standing[i] IS NULL
	     ORDER BY i
	    ON CONFLICT (mesh_id, sender_id, client_id) DO NOTHING
	    RETURNING id, tag, created_at, mesh_id, sender_id, client_id)
	  SELECT i, s.id, s.tag, s.created_at
	    FROM stored s JOIN generate_subscripts(client_ids, 1) AS i
	      ON standing[i] IS NULL
	     AND (mesh_ids[i], sender_ids[i], client_ids[i]) = (s.mesh_id, s.sender_id, s.client_id)
	LOOP
		message_ids[inserted.i] := inserted.id;
		message_tags[inserted.i] := inserted.tag;
		created_ats[inserted.i] := inserted.created_at;
	END LOOP;
	FOR n IN 1 .. cardinality(client_ids) LOOP
		IF standing[n] IS NULL AND message_ids[n] IS NULL THEN
			standing[n] := 'duplicate';
		END IF;
	END LOOP;

	-- 5. One delivery row per kept recipient of each stored message, with the member's next seq: counted on
	-- from the locked feed's last seq in request order, so without gaps; then the feeds' new last seqs.
	SELECT array_agg((request, member_id, true, feed_seq, feed_seq + nth)::accept_recipient)
	  INTO delivered
	  FROM (SELECT p.request, p.member_id, p.feed_seq,
	               row_number() OVER (PARTITION BY p.member_id ORDER BY p.request) AS nth
	          FROM unnest(pairs) p
	         WHERE p.kept AND message_ids[p.request] IS NOT NULL) numbered;
	INSERT INTO deliveries (message_id, member_id, seq)
	SELECT message_ids[d.request], d.member_id, d.seq FROM unnest(delivered) d;
	UPDATE delivery_feeds f SET last_seq = d.last_seq
	  FROM (SELECT member_id, max(seq) AS last_seq FROM unnest(delivered) GROUP BY member_id) d
	 WHERE f.member_id = d.member_id;

	-- 6. One outcome per request, in order. A duplicate's is its original as stored (its recipients as at
	-- its first accept); a copy's is its first copy's, marked duplicate.
	RETURN QUERY
	WITH outcome (request, refused, message_id, message_tag, client_id, sender_pubkey, sender_session, target, body, kind,
	              schedule_id, occurrence, created_at, recipients, seqs, duplicate, nodes, dropped) AS (
	  SELECT i, NULL::text, message_ids[i], message_tags[i], client_ids[i], sender_pubkeys[i], sender_sessions[i],
	         targets[i], bodies[i], kinds[i], schedule_ids[i], occurrences[i], created_ats[i],
	         coalesce(d.members, '{}'), coalesce(d.seqs, '{}'), false,
	         CASE WHEN targets[i] <> '*' THEN
	           ARRAY(SELECT DISTINCT p.node_id FROM presence p
	                  WHERE p.member_id = ANY (d.members) AND p.disconnected_at IS NULL ORDER BY 1)
	         END,
	         coalesce(x.dropped, 0)
	    FROM generate_subscripts(client_ids, 1) AS i
	    LEFT JOIN (SELECT request, array_agg(member_id ORDER BY member_id) AS members,
	                      array_agg(seq ORDER BY member_id) AS seqs
	                 FROM unnest(delivered) GROUP BY request) d ON d.request = i
	    LEFT JOIN (SELECT request, count(*)::integer AS dropped
	                 FROM unnest(pairs) WHERE NOT kept GROUP BY request) x ON x.request = i
	   WHERE standing[i] IS NULL
	  UNION ALL
	  SELECT i, NULL, m.id, m.tag, m.client_id, s.pubkey, m.sender_session, m.target, m.body, m.kind, m.schedule_id,
	         m.occurrence, m.created_at, m.recipients, '{}', true, NULL, 0
	    FROM generate_subscripts(client_ids, 1) AS i
	    JOIN messages m ON m.mesh_id = mesh_ids[i] AND m.sender_id = sender_ids[i] AND m.client_id = client_ids[i]
	    JOIN members s ON s.id = m.sender_id
	   WHERE standing[i] = 'duplicate'
	  UNION ALL
	  -- A refusal carries its request's target: the not_found message names it.
	  SELECT i, standing[i], NULL, NULL, NULL, NULL, NULL, targets[i], NULL, NULL, NULL, NULL, NULL, NULL, NULL, false,
	         NULL, 0
	    FROM generate_subscripts(client_ids, 1) AS i
	   WHERE standing[i] NOT IN ('duplicate', 'copy')
	)
	SELECT o.refused, o.message_id, o.message_tag, o.client_id, o.sender_pubkey, o.sender_session, o.target, o.body, o.kind,
	       o.schedule_id, o.occurrence, o.created_at, o.recipients, o.seqs, o.duplicate OR o.request <> i,
	       o.nodes, o.dropped
	  FROM generate_subscripts(client_ids, 1) AS i JOIN outcome o ON o.request = first_copy[i]
	 ORDER BY i;
	-- A duplicate whose original is gone (retention deleted it meanwhile) has no outcome: fail the batch,
	-- as nothing of it may be committed without its outcome reaching the sender.
	GET DIAGNOSTICS outcomes = ROW_COUNT;
	IF outcomes <> cardinality(client_ids) THEN
		RAISE EXCEPTION 'accept_messages: % outcomes for % requests (an original message vanished)',
			outcomes, cardinality(client_ids);
	END IF;
END;
$$;
