"""Every hf training run of calibration/runs/hf/*.jsonl with its allocator peaks: max_memory_allocated,
max_memory_reserved, their gap, and NVML less reserved (GiB), by model, stack, micro-batch x seq.
usage (repository root): python3 calibration/runs/raw/allocgap-h100-2026-11-25/tabulate_gaps.py"""
import json,glob,os
G=2**30
rows=[]
for f in sorted(glob.glob('calibration/runs/hf/*.jsonl')):
    for l in open(f):
        r=json.loads(l)
        s=r['scenario']
        if s.get('mode')!='train': continue
        m=r.get('metrics') or {}
        res=(m.get('peak_mem_reserved_bytes_per_rank') or [None])[0]
        al=(m.get('peak_mem_allocated_bytes_per_rank') or [None])[0]
        nv=(m.get('peak_mem_bytes_per_gpu_nvml') or [None])[0]
        rep=r['job'].get('reported',{}) if r.get('job') else {}
        stack=rep.get('hf_stack',s.get('stack'))
        mdl=os.path.basename(s['model']).replace('.json','')
        g=lambda x: f"{x/G:6.2f}" if x else "   -  "
        print(f"{os.path.basename(f)[:22]:22} {r['run_id']:8} {r['status']:4} {mdl[:22]:22} {stack:10} {s.get('precision'):5} rc={s.get('recompute')[:5]:5} mb{s['micro_batch']}x{s['seq']} ga{s.get('grad_accum')} gpu={r['machine']['gpu_name'][7:11] if r.get('machine') else ''} alloc={g(al)} res={g(res)} gap={g(res-al) if res and al else '  -  '} nv-res={g(nv-res) if nv and res else '  -  '} {rep.get('compile','')}{'/fp8' if rep.get('fp8') not in (None,'0') else ''}")
