import csv,gzip,sys
import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); from caching_allocator import Alloc
G=2**30
def load(name):
    return list(csv.DictReader(gzip.open(f'{os.path.dirname(os.path.abspath(__file__))}/{name}.events.csv.gz','rt')))
for name in sys.argv[1:]:
    ev=load(name); a=Alloc(); live={}
    real_res=0; real_peak=0; real_alloc=0; real_pa=0; segs_real=0
    first_div=None
    for e in ev:
        act=e['action']; sz=int(e['size']); ad=e['addr']
        if act=='alloc':
            live[ad]=a.alloc(sz); real_alloc+=sz; real_pa=max(real_pa,real_alloc)
        elif act=='free_completed':
            if ad in live: a.free(live.pop(ad)); real_alloc-=sz
        elif act=='segment_alloc':
            real_res+=sz; real_peak=max(real_peak,real_res); segs_real+=1
        elif act=='segment_free':
            real_res-=sz
        if first_div is None and a.reserved!=real_res and act in('alloc',):
            first_div=(e['i'],a.reserved/G,real_res/G)
    print(f"{name:30} real alloc {real_pa/G:.3f} res {real_peak/G:.3f} segs {segs_real} | model alloc {a.peak_allocated/G:.3f} res {a.peak_reserved/G:.3f} segs {a.nmalloc} first_div {first_div}")
